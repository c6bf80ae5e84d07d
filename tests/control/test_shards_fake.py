"""Shards end to end on fake Slurm: one array, one attempt per shard, `list`/`status`/`cancel` of
the run; the fake counts every scheduler call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dd_slurm.testing.fake_slurm import install
from tests.runtime.harness import plan_data

EXE = [str(Path(sys.executable).parent / "dd-slurm")]


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(EXE + list(args), capture_output=True, text=True, timeout=60, env=env)
    assert 0 == done.returncode, done.stderr
    return done


def sharded_plan(count: int, max_concurrent: int, fail_shard: int | None = None, client_sleep: float = 0) -> dict:
    data = plan_data("single-node")
    data["name"] = "shards"
    data["job"]["array"] = {"count": count, "max_concurrent": max_concurrent}
    data["client"]["argv"] += ["--tag", "{shard_index}/{num_shards}", "--sleep", str(client_sleep)]
    if fail_shard is not None:
        data["deployments"][0]["argv"] += ["--fail-loading-if", f"{{shard_index}}={fail_shard}"]
    return data


def submit(tmp: Path, env: dict, data: dict) -> dict:
    (tmp / "plan.json").write_text(json.dumps(data))
    return json.loads(cli(env, "submit", "--json", str(tmp / "plan.json"), "-w", str(tmp / "ws")).stdout)


def journal(shard: Path) -> list[dict]:
    path = shard / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_until(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A 4-shard array, at most 2 at once, whose shard 2's server fails to load, run to the end;
    waited for through the journals only, so nothing has asked the scheduler yet."""
    tmp = tmp_path_factory.mktemp("shards")
    fake = install(tmp / "bin")
    env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake.bin_dir)}
    out = submit(tmp, env, sharded_plan(4, 2, fail_shard=2))
    shards = [Path(s) for s in out["shards"]]
    wait_until(lambda: all(any(e["to"] == "done" for e in journal(s)) for s in shards), 100, "every shard done")
    wait_until(lambda: _all_tasks_ended(fake, out["job_id"]), 30, "every task's runner to report")
    return fake, env, out, shards


def _all_tasks_ended(fake, job_id: str) -> bool:
    tasks = fake.read()["jobs"][job_id]["tasks"]
    return len(tasks) == 4 and all((fake.bin_dir / "jobs" / f"{job_id}_{i}.rc").exists() for i in tasks)


def test_every_shard_runs_with_its_own_index_at_most_two_at_once(finished_run) -> None:
    """Each shard is its own attempt: shard 2 failed (its server, given {shard_index}=2, did not
    load), the others succeeded with records tagged `i/4`; journals never overlap more than 2."""
    _, _, out, shards = finished_run
    ends = [[e for e in journal(s) if e.get("outcome")][-1] for s in shards]
    assert [("succeeded", "ok"), ("succeeded", "ok"), ("failed", "server_exited_while_loading"),
            ("succeeded", "ok")] == [(e["outcome"], e["reason"]) for e in ends]
    tags = [{json.loads(line)["tag"] for line in (s / "results" / "records.jsonl").read_text().splitlines()}
            for s in (shards[0], shards[1], shards[3])]
    assert [{"0/4"}, {"1/4"}, {"3/4"}] == tags
    assert 2 == max_overlap([(journal(s)[0]["ts"], journal(s)[-1]["ts"]) for s in shards])
    assert [f"{out['job_id']}_{i}" for i in range(4)] == [json.loads(cli(finished_run[1], "status", "--json", str(s))
                                                                       .stdout)["scheduler"]["job_id"] for s in shards]


def test_list_asks_the_scheduler_once_then_never_again(finished_run) -> None:
    """`list` over the run's four shards: one squeue and one sacct for all of them; the terminal
    answers are persisted, so a second `list` makes no call at all and says the same."""
    fake, env, out, shards = finished_run
    for shard in shards:  # as the supervisors left them: no observation persisted by anyone yet
        record = json.loads((shard / "attempt.json").read_text())
        (shard / "attempt.json").write_text(json.dumps({**record, "observations": []}))
    (shards[0].parent / ".list-cache.json").unlink(missing_ok=True)
    with fake.edit() as state:
        state["calls"] = []
    first = json.loads(cli(env, "list", "--json", "-w", str(shards[0].parent.parent)).stdout)
    assert (1, 1) == (len(fake.calls("squeue")), len(fake.calls("sacct")))
    second = json.loads(cli(env, "list", "--json", "-w", str(shards[0].parent.parent)).stdout)
    assert (1, 1) == (len(fake.calls("squeue")), len(fake.calls("sacct")))
    rows = [(r["id"], r["shard"], r["state"], r["effective"]["outcome"], r["job_id"]) for r in first["attempts"]]
    assert [(s.name, i, "done", "failed" if i == 2 else "succeeded", f"{out['job_id']}_{i}")
            for i, s in enumerate(shards)] == rows
    assert rows == [(r["id"], r["shard"], r["state"], r["effective"]["outcome"], r["job_id"])
                    for r in second["attempts"]]


def test_status_of_a_run_reports_every_shard(finished_run) -> None:
    """`status <run dir> --json`: the run's array job and each shard's attempt and effective outcome."""
    _, env, out, shards = finished_run
    view = json.loads(cli(env, "status", "--json", out["attempt_dir"]).stdout)
    assert (out["job_id"], 4) == (view["run"]["job_id"], view["run"]["num_shards"])
    assert [(str(s), "failed" if i == 2 else "succeeded") for i, s in enumerate(shards)] == \
        [(v["attempt"]["dir"], v["effective"]["outcome"]) for v in view["shards"]]


def test_cancelling_a_run_is_one_scancel_and_pending_shards_never_start(tmp_path) -> None:
    """Four shards, two at once, clients that take 30 s: cancelling the run mid-way is one
    `scancel <array id>`; the two running shards end cancelled, the two pending ones never start
    (no journal) and `list` shows them cancelled by the scheduler."""
    fake = install(tmp_path / "bin")
    env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake.bin_dir)}
    out = submit(tmp_path, env, sharded_plan(4, 2, client_sleep=30))
    shards = [Path(s) for s in out["shards"]]
    wait_until(lambda: all(any(e["to"] == "client" for e in journal(s)) for s in shards[:2]), 60, "two clients")
    cli(env, "cancel", out["attempt_dir"])
    wait_until(lambda: all(any(e["to"] == "done" for e in journal(s)) for s in shards[:2]), 60, "cancelled shards done")
    time.sleep(0.5)
    plain = [c for c in fake.calls("scancel") if not any(a.startswith("--signal") for a in c)]
    assert [[out["job_id"]]] == plain
    assert [[], []] == [journal(s) for s in shards[2:]]
    rows = json.loads(cli(env, "list", "--json", "-w", str(tmp_path / "ws")).stdout)["attempts"]
    assert [("done", "cancelled", "attempt"), ("done", "cancelled", "attempt"),
            ("staged", "cancelled", "scheduler"), ("staged", "cancelled", "scheduler")] == \
        [(r["state"], r["effective"]["outcome"], r["effective"]["from"]) for r in rows]


def test_list_takes_no_task_of_an_older_array_that_had_the_run_s_id(finished_run) -> None:
    """Accounting still holds an older array with the run's job id (slurmctld lost its state and
    counts again; its four tasks were cancelled an hour before this run was submitted), and the
    run's own rows are not in accounting yet: `list` shows the same job states with the older
    array as without it (accounting lag, not `cancelled`), since sacct is asked only since then."""
    fake, env, out, shards = finished_run

    def job_states() -> list:
        for shard in shards:
            record = json.loads((shard / "attempt.json").read_text())
            (shard / "attempt.json").write_text(json.dumps({**record, "observations": []}))
        (shards[0].parent / ".list-cache.json").unlink(missing_ok=True)
        listed = json.loads(cli(env, "list", "--json", "-w", str(shards[0].parent.parent)).stdout)
        return [(r["shard"], r["job_state"]) for r in listed["attempts"]]

    run_id = json.loads((shards[0] / "attempt.json").read_text())["shard"]["run_id"]
    submitted = json.loads((shards[0].parent.parent / "runs" / run_id / "run.json").read_text())["submitted_at"]
    fake.set_job(out["job_id"], in_sacct=False)
    try:
        alone = job_states()
        fake.add_older_array(out["job_id"], {i: ("CANCELLED by 0", "0:0") for i in range(4)}, ended_at=submitted - 3600)
        assert alone == job_states()
    finally:
        fake.set_job(out["job_id"], in_sacct=True)
        with fake.edit() as state:
            state.pop("older", None)


def test_submit_of_an_array_says_how_many_shards_it_submitted(fake_slurm, tmp_path) -> None:
    """`submit` (text) of a 3-shard plan: the run dir, then `submitted batch job J (an array of 3
    shards)`."""
    env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    (tmp_path / "plan.json").write_text(json.dumps(sharded_plan(3, 1)))
    lines = cli(env, "submit", str(tmp_path / "plan.json"), "-w", str(tmp_path / "ws")).stdout.splitlines()
    assert [True, "submitted batch job 1000 (an array of 3 shards)"] == [lines[0].startswith(str(tmp_path)), lines[1]]


def test_watching_a_finished_run_prints_each_shard_once_and_the_summary(finished_run) -> None:
    """`status --watch RUN` of the finished run: the run line, each shard's line, one summary line
    (`done 3/4, failed 1`), and exit 4 because a shard failed."""
    _, env, out, shards = finished_run
    done = subprocess.run(EXE + ["status", "--watch", "--interval", "0.2", out["attempt_dir"]], capture_output=True,
                          text=True, timeout=60, env=env)
    lines = done.stdout.splitlines()
    assert (4, 6) == (done.returncode, len(lines)), done.stdout + done.stderr
    assert [s.name for s in shards] == [line.split(":")[0].strip() for line in lines[1:5]]
    assert "done 3/4, failed 1" == lines[5].split("]  ")[1]
