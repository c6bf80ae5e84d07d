"""Control-plane operations on fake Slurm: effective outcome (a dead supervisor), finished is
finished (no scheduler call), concurrent status in time order, a scheduler that cannot answer,
cancel of an ended attempt, failed submissions that leave nothing behind, raw task ids."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.control import status as attempt_status
from dd_slurm.control.submit import submit
from dd_slurm.errors import ToolFailed
from dd_slurm.machine.journal import Journal
from dd_slurm.plan.io import load_plan
from dd_slurm.scheduler.commands import QueryResult
from dd_slurm.scheduler.parse import parse_squeue
from dd_slurm.store.attempt_record import read_record, update_record
from tests.runtime.harness import plan_data, stage_plan


def staged(tmp_path: Path, job_id: str | None = None, **record):
    """A staged attempt, submitted as `job_id` when given: the job fake_job makes, named dd-x."""
    attempt = stage_plan(tmp_path, plan_data()).attempt_dir
    with update_record(attempt) as fresh:
        fresh.update(job_id=job_id, submitted_at=1_700_000_000.0 if job_id else None, job_name="dd-x", **record)
    return attempt


def journal_to(attempt: Path, *states: str, outcome: str | None = None, reason: str | None = None) -> None:
    journal, previous = Journal(attempt, FakeClock()), "staged"
    for state in states:
        ending = state in ("cleanup", "done")
        journal.append("transition", previous, state, "t", outcome=outcome if ending else None,
                       reason=reason if ending else None)
        previous = state


def fake_job(fake_slurm, job_id: str, **fields) -> None:
    with fake_slurm.edit() as state:
        state["jobs"][job_id] = {"id": job_id, "name": "dd-x", "held": False, "array": None, "pid": None,
                                 "cancelled_by": None, "in_squeue": True, "in_sacct": True, "state": None,
                                 "reason": None, "exit": None, **fields}


EFFECTIVE = [
    # attempt state, attempt outcome/reason, scheduler state (None: no observation), expected effective
    ("done", "succeeded", "ok", "completed", {"outcome": "succeeded", "reason": "ok", "from": "attempt"}),
    ("done", "failed", "server_crashed", "running", {"outcome": "failed", "reason": "server_crashed", "from": "attempt"}),
    ("client", None, None, "running", None),
    ("client", None, None, "pending", None),
    ("client", None, None, None, None),
    ("client", None, None, "failed", {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"}),
    ("deploying", None, None, "cancelled", {"outcome": "cancelled", "reason": "supervisor_lost", "from": "scheduler"}),
    ("staged", None, None, "timeout", {"outcome": "timed_out", "reason": "supervisor_lost", "from": "scheduler"}),
    ("client", None, None, "lost", {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"}),
    ("client", None, None, "node_fail", {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"}),
    ("client", None, None, "completed", {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"}),
    ("ready", None, None, "out_of_memory", {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"}),
]


@pytest.mark.parametrize(("state", "outcome", "reason", "sched", "expected"), EFFECTIVE)
def test_effective_outcome(state, outcome, reason, sched, expected, tmp_path) -> None:
    """The attempt's own outcome once done; null while the job lives; from the scheduler's
    terminal state, reason supervisor_lost, once the job ended without the attempt ending (its
    supervisor ran: it left a journal)."""
    from dd_slurm.scheduler.states import is_terminal

    (tmp_path / "journal.jsonl").write_text("")
    obs = {"state": sched, "terminal": is_terminal(sched)} if sched else None
    assert expected == attempt_status.effective({"dir": str(tmp_path), "state": state, "outcome": outcome,
                                                 "reason": reason}, obs)


@pytest.mark.parametrize(("left", "reason"), [((), "never_started"), (("supervisor.json",), "supervisor_lost"),
                                              (("journal.jsonl",), "supervisor_lost")])
def test_a_job_that_ended_before_its_supervisor_ran_never_started(tmp_path, left: tuple, reason: str) -> None:
    """A staged attempt whose job was cancelled while pending (no journal, no supervisor record)
    is cancelled `never_started`, not a lost supervisor; one whose supervisor left a trace is."""
    for name in left:
        (tmp_path / name).write_text("")
    obs = {"state": "cancelled", "terminal": True}
    assert {"outcome": "cancelled", "reason": reason, "from": "scheduler"} == attempt_status.effective(
        {"dir": str(tmp_path), "state": "staged", "outcome": None, "reason": None}, obs)


@pytest.mark.parametrize(("signal", "expected"), [(15, "cancelled"), (2, "cancelled"), (9, "failed"), (None, "failed")])
def test_a_batch_script_a_stop_signal_ended_is_cancelled(tmp_path, signal, expected: str) -> None:
    """A job that failed because a stop signal (SIGTERM, SIGINT) ended its batch script before a
    supervisor could record anything (its first instant) was cancelled; any other failure stays failed."""
    obs = {"state": "failed", "terminal": True, "signal": signal}
    assert {"outcome": expected, "reason": "never_started", "from": "scheduler"} == attempt_status.effective(
        {"dir": str(tmp_path), "state": "staged", "outcome": None, "reason": None}, obs)


def test_a_dead_supervisor_shows_as_supervisor_lost(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """The job failed (its supervisor was SIGKILLed) while the attempt says client and readiness
    says ready: status --json gives effective supervisor_lost, the text marks readiness stale."""
    from dd_slurm.control.report import status_text

    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight", "deploying", "ready", "client")
    fake_job(fake_slurm, "1000", state="FAILED", exit="137:0")
    view = attempt_status.status(attempt, fake_commands, clock)
    assert {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"} == view["effective"]
    (attempt / "readiness.json").write_text(json.dumps({
        "schema": 2, "attempt_id": attempt.name, "endpoints": "published",
        "deployments": {"m": {"state": "ready", "deployment": "m", "replica": 0, "expected": 1,
                              "ready": ["http://h:1"], "nodes": ["h"],
                              "base_url": "http://h:1", "deadline": None, "last_probe": None, "detail": None}}}))
    text = status_text(attempt_status.status(attempt, fake_commands, clock))
    assert "effective: failed (supervisor_lost" in text and "[stale: its supervisor is gone]" in text


def test_finished_is_finished(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """Once sacct's terminal record is persisted, status makes no scheduler call at all."""
    attempt = staged(tmp_path, "1000")
    fake_job(fake_slurm, "1000", state="COMPLETED")
    first = attempt_status.status(attempt, fake_commands, clock)["scheduler"]
    calls = len(fake_slurm.calls())
    again = attempt_status.status(attempt, fake_commands, clock)["scheduler"]
    assert (first, calls) == (again, len(fake_slurm.calls()))
    assert ("completed", "sacct", 2) == (again["state"], again["source"], calls)


def test_a_reused_array_id_does_not_end_the_attempt(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """Slurm handed the array id out again (slurmctld lost its state): accounting still has an
    older task 1000_1 that FAILED before this attempt was submitted. status does not take that
    failure for this attempt's (no effective outcome): sacct is asked only since the submission."""
    attempt = staged(tmp_path, "1000_1")
    journal_to(attempt, "verified", "preflight", "deploying", "ready", "client")
    fake_slurm.add_older_array("1000", {0: ("COMPLETED", "0:0"), 1: ("FAILED", "4:0")}, ended_at=1_699_999_000.0)
    view = attempt_status.status(attempt, fake_commands, clock)
    assert (None, False) == (view["effective"], view["scheduler"]["terminal"])


class _Gated:
    """A commands stand-in whose query answers running, after `release` is set."""

    def __init__(self, release: threading.Event | None) -> None:
        self.release = release

    def for_cluster(self, cluster):
        return self

    def query(self, job_ids, submitted_since=None):
        if self.release:
            self.release.wait(10)
        return QueryResult(parse_squeue("1000|RUNNING|None|dd-x\n"), [], None, 1)


def test_concurrent_status_keeps_time_order(tmp_path) -> None:
    """Two status rounds at once: the earlier one finishes last. Observations stay in time order
    and last_seen never moves backwards."""
    attempt = staged(tmp_path, "1000")
    release = threading.Event()
    early = threading.Thread(target=attempt_status.observe_attempt,
                             args=(attempt, read_record(attempt), _Gated(release), FakeClock(1_700_000_100.0)))
    early.start()
    attempt_status.observe_attempt(attempt, read_record(attempt), _Gated(None), FakeClock(1_700_000_200.0))
    release.set()
    early.join(10)
    record = read_record(attempt)
    assert [1_700_000_100.0, 1_700_000_200.0] == [o["time"] for o in record["observations"]]
    assert 1_700_000_200.0 == record["last_seen"]


def test_concurrent_status_processes_never_lose_an_observation(fake_slurm, tmp_path, dd_slurm_exe, clean_env) -> None:
    """Eight `status` processes at once on one attempt: eight observations, in time order."""
    attempt = staged(tmp_path, "1000")
    fake_job(fake_slurm, "1000", state="RUNNING")
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    procs = [subprocess.Popen(dd_slurm_exe + ["status", "--json", str(attempt)], env=env, stdout=subprocess.DEVNULL)
             for _ in range(8)]
    assert [0] * 8 == [p.wait(60) for p in procs]
    times = [o["time"] for o in read_record(attempt)["observations"]]
    assert (8, sorted(times)) == (len(times), times)


def test_status_while_squeue_fails_shows_disk_state_and_exits_3(fake_slurm, tmp_path, dd_slurm_exe, clean_env) -> None:
    """squeue cannot reach the controller: the state on disk is printed, the scheduler marked
    unavailable, exit 3 with one error line; attempt.json is unchanged."""
    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight")
    before = (attempt / "attempt.json").read_bytes()
    fake_slurm.add_fault("squeue", exit=1, stderr="squeue: error: Unable to contact slurm controller\n", times=6)
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    out = subprocess.run(dd_slurm_exe + ["status", "--json", str(attempt)], env=env, capture_output=True, text=True,
                         timeout=60)
    view = json.loads(out.stdout)
    assert (3, "preflight", None) == (out.returncode, view["attempt"]["state"], view["scheduler"])
    assert "Unable to contact" in view["scheduler_error"]
    assert 1 == len(out.stderr.splitlines()) and out.stderr.startswith("error: scheduler unavailable")
    text = subprocess.run(dd_slurm_exe + ["status", str(attempt)], env=env, capture_output=True, text=True, timeout=60)
    assert (3, True) == (text.returncode, "scheduler: unavailable" in text.stdout)
    assert before == (attempt / "attempt.json").read_bytes()


def test_cancel_of_an_ended_attempt_records_nothing(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """An attempt that is done, or whose job is terminal: not cancelled, nothing recorded, no scancel."""
    done = staged(tmp_path / "a", "1000")
    journal_to(done, "verified", "cleanup", "done", outcome="failed", reason="hosts")
    fake_job(fake_slurm, "1001", state="TIMEOUT")
    gone = staged(tmp_path / "b", "1001")
    before = [(d / "attempt.json").read_bytes() for d in (done, gone)]
    found = [attempt_status.cancel(d, fake_commands, clock) for d in (done, gone)]
    assert [False, False] == [f["cancel_requested"] for f in found]
    assert "done (failed, hosts)" in found[0]["ended"] and "timeout" in found[1]["ended"]
    assert (before, []) == ([(d / "attempt.json").read_bytes() for d in (done, gone)], fake_slurm.calls("scancel"))


def test_a_failed_scancel_records_nothing(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """scancel refusing (permission denied): the error surfaces, no cancel request is recorded."""
    fake_job(fake_slurm, "1000", state="RUNNING")
    attempt = staged(tmp_path, "1000")
    fake_slurm.add_fault("scancel", exit=1, stderr="scancel: error: Kill job error on job id 1000: Access/permission denied\n",
                         times=2)
    with pytest.raises(ToolFailed):
        attempt_status.cancel(attempt, fake_commands, clock)
    assert [] == read_record(attempt)["cancel_requests"]


def test_cancel_records_the_request_after_scancel(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """A live job: scancel, then the request is recorded."""
    fake_job(fake_slurm, "1000", state="RUNNING")
    attempt = staged(tmp_path, "1000")
    assert attempt_status.cancel(attempt, fake_commands, clock)["cancel_requested"]
    assert ([["1000"]], 1) == (fake_slurm.calls("scancel"), len(read_record(attempt)["cancel_requests"]))


def _plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_data()))
    return path


def test_a_refused_submission_leaves_no_staged_attempt(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """sbatch refuses the job: nothing was submitted, the staged attempt is removed and the error
    says so."""
    fake_slurm.add_fault("sbatch", exit=1, stderr="sbatch: error: invalid partition specified: nope\n")
    with pytest.raises(ToolFailed) as caught:
        submit(load_plan(_plan_file(tmp_path)), str(tmp_path / "ws"), fake_commands, clock, {})
    assert [] == list((tmp_path / "ws" / "attempts").iterdir())
    assert "was removed" in str(caught.value)


def test_a_submission_of_unknown_fate_keeps_and_names_its_attempt(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """sbatch's answer was lost and the lookup cannot tell: the attempt is kept, named, and the
    error recorded in it."""
    from dd_slurm.errors import SubmissionUnknown

    fake_slurm.add_fault("sbatch", exit=1, stderr="sbatch: error: Socket timed out on send/recv operation\n")
    fake_slurm.add_fault("sacct", exit=1, stderr="sacct: error: slurmdbd: Connection refused\n", times=3)
    with pytest.raises(SubmissionUnknown) as caught:
        submit(load_plan(_plan_file(tmp_path)), str(tmp_path / "ws"), fake_commands, clock, {})
    [kept] = list((tmp_path / "ws" / "attempts").iterdir())
    assert f"kept at {kept}" in str(caught.value)
    assert "Socket timed out" in read_record(kept)["submit_error"]


def test_an_adopted_submission_is_recorded_and_said(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """sbatch created the job then timed out: the job is adopted, attempt.json says how, and
    submit's answer carries the note."""
    fake_slurm.add_fault("sbatch", exit=1, stderr="sbatch: error: Socket timed out on send/recv operation\n",
                         after_work=True, job={"held": True})
    out = submit(load_plan(_plan_file(tmp_path)), str(tmp_path / "ws"), fake_commands, clock, {})
    record = read_record(Path(out["attempt_dir"]))
    assert ("1000", "1000", True) == (out["job_id"], record["job_id"], record["submission"]["adopted"])
    assert "adopted job 1000" in out["note"]


def test_a_raw_task_id_finds_its_task() -> None:
    """`query 21`, where 21 is the raw id of array task 17_1 (recorded on the lab cluster): that
    task's observation, not `lost`."""
    from dd_slurm.scheduler.observe import LagClock, index_rows, observe
    from dd_slurm.scheduler.parse import parse_sacct
    from tests.conftest import FIXTURES

    squeue = json.loads((FIXTURES / "slurm" / "squeue-raw-task.json").read_text())["stdout"]
    sacct = json.loads((FIXTURES / "slurm" / "sacct-raw-task.json").read_text())["stdout"]
    found = observe(["21"], index_rows(parse_squeue(squeue, raw_ids=True)), index_rows(parse_sacct(sacct, raw_ids=True)),
                    LagClock(0, None))
    assert [("17_1", "running", "squeue")] == [(o.job_id, o.state, o.source) for o in found]


def test_watch_ends_on_the_effective_outcome(fake_slurm, tmp_path, dd_slurm_exe, clean_env) -> None:
    """`status --watch` of an attempt whose supervisor is gone stops as soon as the job has ended,
    says the effective outcome, and exits with its code (4: not succeeded)."""
    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight", "deploying")
    fake_job(fake_slurm, "1000", state="CANCELLED")
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    out = subprocess.run(dd_slurm_exe + ["status", "--watch", "--interval", "0.1", str(attempt)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert 4 == out.returncode, out.stderr
    assert "=> cancelled (supervisor_lost), exit 4" in out.stdout.splitlines()[0]
    assert "supervisor killed?" in out.stdout


def test_submit_says_when_it_adopted_a_job(fake_slurm, tmp_path, dd_slurm_exe, clean_env) -> None:
    """`submit` (text) prints the note when sbatch's answer was lost and the job was adopted."""
    fake_slurm.add_fault("sbatch", exit=1, stderr="sbatch: error: Zero Bytes were transmitted or received\n",
                         after_work=True, job={"held": True})
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    out = subprocess.run(dd_slurm_exe + ["submit", str(_plan_file(tmp_path)), "-w", str(tmp_path / "ws")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert (0, 1) == (out.returncode, len(fake_slurm.calls("sbatch")))
    assert "submitted batch job 1000" in out.stdout and "note: sbatch's answer was ambiguous" in out.stdout


def test_query_of_a_job_nobody_knows_exits_2_after_printing_every_answer(fake_slurm, dd_slurm_exe, clean_env) -> None:
    """`query 1000 1001` where only 1000 exists: both observations are printed (1001 `lost`, in
    neither squeue nor sacct), then one error line naming 1001, exit 2 (was exit 0)."""
    fake_job(fake_slurm, "1000", state="RUNNING")
    out = subprocess.run(dd_slurm_exe + ["query", "1000", "1001"], capture_output=True, text=True, timeout=60,
                         env={**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)})
    assert (2, ["1000\trunning", "1001\tlost"], "error: no job 1001 on this cluster: in neither squeue nor sacct\n") == (
        out.returncode, [line.rsplit("\t", 2)[0] for line in out.stdout.splitlines()], out.stderr)


def test_list_fits_80_columns_for_a_typical_workspace() -> None:
    """`list` sizes each column to its widest cell: attempts named like `demo-20261206T120000-1a2b3c`
    with a job state or an outcome fit an 80-column terminal, columns aligned."""
    from dd_slurm.control.workspace import list_text

    def row(i: int, state: str, effective: dict | None, job_state: str | None) -> dict:
        return {"id": f"demo-20261206T12000{i}-1a2b3{i}", "state": state, "effective": effective,
                "job_id": f"4{i}_1", "job_state": job_state, "age_s": 7200.0}

    text = list_text({"attempts": [row(0, "done", {"outcome": "failed", "reason": "client_failed"}, "failed"),
                                   row(1, "deploying", None, "running")]})
    assert ["ATTEMPT                      STATE     OUTCOME                JOB          AGE",
            "demo-20261206T120000-1a2b30  done      failed (client_failed) 40_1         2h",
            "demo-20261206T120001-1a2b31  deploying -                      41_1 running 2h"] == text.splitlines()
    assert max(len(line) for line in text.splitlines()) <= 80


def test_every_missing_forwarded_variable_is_named_at_once(fake_slurm, dd_slurm_exe, clean_env, tmp_path) -> None:
    """A plan forwarding HF_TOKEN (client and deployment) and WANDB_API_KEY (deployment), submitted
    where neither is set: exit 2, one line naming both with the fields that forward them (it named
    the first only), no sbatch call and nothing staged."""
    data = plan_data()
    data["client"]["env"]["forward"] = ["HF_TOKEN"]
    data["deployments"][0]["env"]["forward"] = ["WANDB_API_KEY", "HF_TOKEN"]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    out = subprocess.run(dd_slurm_exe + ["submit", str(tmp_path / "plan.json"), "-w", str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=60,
                         env={**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)})
    expected = ("error: not set in this environment, so they cannot be forwarded: HF_TOKEN (client.env.forward, "
                "deployments[0].env.forward); WANDB_API_KEY (deployments[0].env.forward)\n")
    assert (2, expected, [], False) == (out.returncode, out.stderr, fake_slurm.calls("sbatch"),
                                        (tmp_path / "ws" / "attempts").exists() and any((tmp_path / "ws" / "attempts").iterdir()))


def test_submit_parsable_prints_only_dir_and_job(fake_slurm, tmp_path, dd_slurm_exe, clean_env) -> None:
    """`submit --parsable` prints `ATTEMPT_DIR;JOB_ID` and nothing else, for scripts (as `sbatch
    --parsable` prints `JOB_ID`); with --json it is a usage error (exit 2) and nothing is submitted."""
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    plan = str(_plan_file(tmp_path))
    out = subprocess.run(dd_slurm_exe + ["submit", "--parsable", plan, "-w", str(tmp_path / "ws")], env=env,
                         capture_output=True, text=True, timeout=60)
    attempt_dir, job_id = out.stdout.rstrip("\n").split(";")
    assert (0, "1000", True, "") == (out.returncode, job_id, (Path(attempt_dir) / "attempt.json").is_file(), out.stderr)
    both = subprocess.run(dd_slurm_exe + ["submit", "--parsable", "--json", plan, "-w", str(tmp_path / "ws")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert (2, 1) == (both.returncode, len(fake_slurm.calls("sbatch")))


def test_the_workspace_and_job_defaults_come_from_the_config_file_and_attempts_by_id(
        fake_slurm, tmp_path, dd_slurm_exe, clean_env) -> None:
    """With `workspace` and `account` in config.toml and no -w: `submit` stages into that workspace
    with `#SBATCH --account="lab"`; then `status` takes the attempt's id prefix, `status --last` and
    `logs --last` the newest, all naming the same attempt."""
    (tmp_path / "cfg" / "dd-slurm").mkdir(parents=True)
    (tmp_path / "cfg" / "dd-slurm" / "config.toml").write_text(f'workspace = "{tmp_path / "ws"}"\naccount = "lab"\n')
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run(dd_slurm_exe + list(args), env=env, capture_output=True, text=True, timeout=60)
        assert 0 == done.returncode, done.stderr
        return done

    attempt_dir = Path(cli("submit", "--parsable", str(_plan_file(tmp_path))).stdout.split(";")[0])
    assert (tmp_path / "ws" / "attempts") == attempt_dir.parent
    assert '#SBATCH --account="lab"' in (attempt_dir / "job.sbatch").read_text().splitlines()
    by_prefix = json.loads(cli("status", "--json", attempt_dir.name[:-3]).stdout)
    by_last = json.loads(cli("status", "--json", "--last").stdout)
    assert [str(attempt_dir)] * 2 == [by_prefix["attempt"]["dir"], by_last["attempt"]["dir"]]
    assert "batch" in cli("logs", "--last").stdout
