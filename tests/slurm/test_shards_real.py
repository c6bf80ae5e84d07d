"""Shards on the real cluster: one Slurm array, one attempt per shard, throttled, cancellable.

Each task asks for 4 GPUs (a whole lab node), so two shards running at once are on different
nodes and their servers, bound to `{host}` on the same port, never collide."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.control.test_shards_fake import journal, max_overlap
from tests.runtime.harness import plan_data
from tests.slurm import real_attempt

EXE = real_attempt.EXE


def cli(*args: str) -> subprocess.CompletedProcess:
    """dd-slurm against this test's lab cluster."""
    done = subprocess.run(EXE + list(args), capture_output=True, text=True, timeout=60,
                          env=real_attempt.CLUSTER["current"].env())
    assert 0 == done.returncode, done.stderr
    return done


def submit_shards(tmp_path: Path, name: str, count: int, max_concurrent: int, fail_shard=None,
                  client_sleep: float = 0, result_path: str = "records.jsonl") -> tuple[dict, list[Path]]:
    data = plan_data("single-node")
    data["client"]["result"]["path"] = result_path
    data["client"]["argv"][data["client"]["argv"].index("--out") + 1] = "{results_dir}/" + result_path
    data["name"] = real_attempt.PREFIX["current"] + name
    data["job"].update(gpus_per_node=4, array={"count": count, "max_concurrent": max_concurrent})
    argv = data["deployments"][0]["argv"]
    argv[argv.index("--load-time") + 1] = "0.3"
    if fail_shard is not None:
        argv += ["--fail-loading-if", f"{{shard_index}}={fail_shard}"]
    data["client"]["argv"] += ["--tag", "{shard_index}/{num_shards}", "--sleep", str(client_sleep)]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    out = json.loads(cli("submit", "--json", str(tmp_path / "plan.json"), "-w", str(tmp_path / "ws")).stdout)
    return out, [Path(s) for s in out["shards"]]


def done(shard: Path) -> bool:
    return any(e["to"] == "done" for e in journal(shard))


def wait_until(predicate, seconds: float, what: str, interval: float = 0.3):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


def outcomes(shards: list[Path]) -> list[tuple[str, str]]:
    ends = [[e for e in journal(s) if e.get("outcome")][-1] for s in shards]
    return [(e["outcome"], e["reason"]) for e in ends]


def listed(tmp_path: Path) -> list[tuple[str, str, str]]:
    rows = json.loads(cli("list", "--json", "-w", str(tmp_path / "ws")).stdout)["attempts"]
    return [(r["id"], r["state"], (r["effective"] or {}).get("outcome")) for r in rows]


def job_gone(job_id: str) -> bool:
    squeue = real_attempt.CLUSTER["current"].tool("squeue")
    out = subprocess.run([squeue, "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return not set(out.stdout.split()) & {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING"}


@pytest.mark.timeout(300)
def test_six_shards_two_at_once_every_one_succeeds(tmp_path) -> None:
    """`array: {count: 6, max_concurrent: 2}`: every shard `succeeded`, each client wrote its own
    shard's records (`{shard_index}` substituted), never more than two shards alive at once (from
    their journals' time spans), and `list` shows all six."""
    out, shards = submit_shards(tmp_path, "six", 6, 2)
    wait_until(lambda: all(done(s) for s in shards), 240, "six shards done")
    wait_until(lambda: job_gone(out["job_id"]), 60, "the array to leave the queue")
    assert [("succeeded", "ok")] * 6 == outcomes(shards)
    tags = [{json.loads(line)["tag"] for line in (s / "results" / "records.jsonl").read_text().splitlines()}
            for s in shards]
    assert [{f"{i}/6"} for i in range(6)] == tags
    assert max_overlap([(journal(s)[0]["ts"], journal(s)[-1]["ts"]) for s in shards]) <= 2
    assert [(s.name, "done", "succeeded") for s in shards] == listed(tmp_path)


@pytest.mark.timeout(240)
def test_cancelling_a_run_midway_and_pending_shards_never_start(tmp_path) -> None:
    """Cancel the run while its first two shards' clients run: those end `cancelled`, the two
    pending shards never start (no journal, even seconds later), and `list` says cancelled for all."""
    out, shards = submit_shards(tmp_path, "cancel", 4, 2, client_sleep=120)
    wait_until(lambda: all(any(e["to"] == "client" for e in journal(s)) for s in shards[:2]), 150, "two clients")
    cli("cancel", out["attempt_dir"])
    wait_until(lambda: all(done(s) for s in shards[:2]), 60, "the running shards done")
    wait_until(lambda: job_gone(out["job_id"]), 60, "the array to leave the queue")
    time.sleep(3)
    assert [("cancelled", "sigterm")] * 2 == outcomes(shards[:2])
    assert [[], []] == [journal(s) for s in shards[2:]]
    assert [(s.name, st, "cancelled") for s, st in zip(shards, ["done", "done", "staged", "staged"])] == \
        listed(tmp_path)


@pytest.mark.timeout(240)
def test_one_shard_whose_server_fails_ends_failed_the_others_succeed(tmp_path) -> None:
    """Deployment argv fails loading when `{shard_index}` is 1: that shard ends `failed`
    (server_exited_while_loading), shards 0 and 2 succeed."""
    out, shards = submit_shards(tmp_path, "onefails", 3, 2, fail_shard=1)
    wait_until(lambda: all(done(s) for s in shards), 200, "three shards done")
    assert [("succeeded", "ok"), ("failed", "server_exited_while_loading"), ("succeeded", "ok")] == outcomes(shards)


@pytest.mark.timeout(240)
def test_a_result_path_with_the_shard_index_names_each_shards_file(tmp_path) -> None:
    """`client.result.path: "part-{shard_index}-of-{num_shards}.jsonl"`, the client writing the
    same name under `{results_dir}`: both shards succeed and each result manifest names its own
    file (the placeholders were once left in the path: every shard ended result_missing)."""
    out, shards = submit_shards(tmp_path, "part", 2, 2, result_path="part-{shard_index}-of-{num_shards}.jsonl")
    wait_until(lambda: all(done(s) for s in shards), 180, "two shards done")
    assert [("succeeded", "ok")] * 2 == outcomes(shards), [journal(s)[-1] for s in shards]
    assert [f"part-{i}-of-2.jsonl" for i in range(2)] == [
        json.loads((s / "result-manifest.json").read_text())["path"] for s in shards]
