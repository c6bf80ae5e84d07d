"""Following an attempt: progress lines, heartbeat, pending reason, readiness time left, the exit
code; and `submit --wait` / `submit ATTEMPT_DIR` on fake Slurm."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.clock import FakeClock
from dd_slurm.control.watch import exit_code, follow, hms, progress

START = 1_700_000_000.0


def view(state="staged", job="pending", reason=None, terminal=False, outcome=None, deployments=None,
         effective=None) -> dict:
    return {"attempt": {"id": "a", "state": state, "outcome": outcome, "reason": "ok" if outcome else None},
            "scheduler": {"job_id": "7", "state": job, "reason": reason, "terminal": terminal},
            "readiness": {"deployments": deployments} if deployments else None, "effective": effective}


@given(st.floats(min_value=0, max_value=10 * 86400, allow_nan=False))
def test_hms_reads_back_as_whole_seconds(seconds: float) -> None:
    """H:MM:SS: minutes and seconds two digits, hours unbounded, fractions dropped."""
    hours, minutes, secs = hms(seconds).split(":")
    assert (int(seconds), 2, 2) == (int(hours) * 3600 + int(minutes) * 60 + int(secs), len(minutes), len(secs))


@pytest.mark.parametrize(("observed", "line"), [
    (view(reason="QOSMaxGRESPerUser"), "staged     | job 7 pending (QOSMaxGRESPerUser)"),
    (view("deploying", "running", deployments={"big": {"state": "starting", "deadline": START + 1800.5,
                                                       "last_probe": {"ok": False, "error": "connection refused"}}}),
     "deploying  big:starting (0:30:00 left; probe: connection refused)  | job 7 running"),
    (view("deploying", "running", deployments={"big-0": {"state": "starting", "deadline": START + 20, "last_probe": {
        "ok": False, "status": 404, "error": None, "path": "/healthz"}}}),
     "deploying  big-0:starting (0:00:20 left; probe: HTTP 404 on /healthz: check health_path)  | job 7 running"),
    (view("deploying", "running", deployments={"big": {"state": "ready", "deadline": START + 5}}),
     "deploying  big:ready  | job 7 running"),
    (view("done", "completed", terminal=True, outcome="succeeded"),
     "done       | job 7 completed  => succeeded (ok), exit 0"),
    (view("client", "timeout", terminal=True,
          effective={"outcome": "timed_out", "reason": "supervisor_lost", "from": "scheduler"}),
     "client     | job 7 timeout  => timed_out (supervisor_lost), exit 4"),
])
def test_progress_lines(observed: dict, line: str) -> None:
    """The pending reason, each deployment's time left and last probe error while deploying, and
    the effective outcome with its exit code (the attempt's when no effective is given)."""
    assert line == progress(observed, START)[1]


def test_heartbeat_when_nothing_changes_and_a_line_per_change() -> None:
    """A deployment loading for 95 s with nothing else moving: a line at the start, heartbeats at
    30, 60 and 90 s (with the time left counting down), then the change and the end."""
    clock = FakeClock(START)
    loading = {"big": {"state": "starting", "deadline": START + 600, "last_probe": None}}
    views = [view("deploying", "running", deployments=loading)] * 96 + \
        [view("done", "completed", terminal=True, outcome="succeeded")]
    lines: list[str] = []
    code = follow(lambda: views.pop(0), clock, lines.append, START, 1.0)
    assert 0 == code
    assert ["[0:00:00]", "[0:00:30]", "[0:01:00]", "[0:01:30]", "[0:01:36]"] == [line.split()[0] for line in lines]
    assert "(0:08:30 left)" in lines[3]


def test_json_lines_one_object_per_observation() -> None:
    """--json: every observation is one line of JSON, heartbeat or not."""
    views = [view(), view(), view("done", "failed", terminal=True, outcome="failed")]
    lines: list[str] = []
    code = follow(lambda: views.pop(0), FakeClock(START), lines.append, START, 1.0, as_json=True)
    assert (4, 3) == (code, len([json.loads(line) for line in lines]))


@pytest.mark.parametrize(("observed", "code"), [
    (view("done", outcome="succeeded"), 0), (view("done", outcome="failed"), 4),
    (view("done", outcome="succeeded", effective={"outcome": "succeeded", "reason": "ok", "from": "attempt"}), 0),
    (view("client", effective={"outcome": "cancelled", "reason": "supervisor_lost", "from": "scheduler"}), 4),
    (view("client"), 4),
])
def test_exit_code_of_the_effective_outcome(observed: dict, code: int) -> None:
    assert code == exit_code(observed)


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)


def _plan(tmp_path, **client) -> str:
    from tests.runtime.harness import plan_data

    data = plan_data("single-node")
    data["client"].update(client)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    return str(plan)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("extra", "code", "outcome"), [([], 0, "succeeded (ok), exit 0"),
                                                        (["--exit-code", "3"], 4, "failed (client_failed), exit 4")])
def test_submit_wait_follows_to_the_end_and_exits_with_the_outcome(dd_slurm_exe, fake_slurm, tmp_path, extra,
                                                                   code, outcome) -> None:
    """`submit --wait` prints the attempt dir and job, then the watch lines, and exits 0 or 4; a
    failure ends the way `inspect` says it: the failure line, the log to open and its last lines."""
    from tests.runtime.harness import plan_data

    argv = plan_data("single-node")["client"]["argv"] + extra
    env = {"PATH": "/usr/bin:/bin", "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    out = run(dd_slurm_exe + ["submit", "--wait", "--interval", "0.2", _plan(tmp_path, argv=argv),
                              "-w", str(tmp_path / "ws")], env=env)
    lines = out.stdout.splitlines()
    assert (code, "submitted batch job 1000") == (out.returncode, lines[1]), out.stderr
    end = next(i for i, line in enumerate(lines) if line.endswith(outcome))
    failure = ["failure: client_failed in client: client exited 3; see logs/client.log",
               f"  log to open: dd-slurm logs {lines[0]} client", "  its last 1 lines:", "    wrote 3 records"]
    assert ([] if code == 0 else failure) == lines[end + 1:]


@pytest.mark.timeout(120)
def test_submit_a_staged_attempt_once(dd_slurm_exe, fake_slurm, tmp_path) -> None:
    """`stage` then `submit ATTEMPT_DIR --wait` runs that very attempt; submitting it again is
    refused (exit 2, one line naming the job) and sbatch is not called again."""
    env = {"PATH": "/usr/bin:/bin", "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    ws = str(tmp_path / "ws")
    attempt = run(dd_slurm_exe + ["stage", _plan(tmp_path), "-w", ws], env=env).stdout.strip()
    first = run(dd_slurm_exe + ["submit", "--wait", "--json", "--interval", "0.2", attempt, "-w", ws], env=env)
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert (0, {"attempt_dir": attempt, "job_id": "1000"}) == (first.returncode, lines[0]), first.stderr
    assert ("done", "succeeded") == (lines[-1]["attempt"]["state"], lines[-1]["attempt"]["outcome"])
    again = run(dd_slurm_exe + ["submit", attempt, "-w", ws], env=env)
    assert (2, [f"error: {attempt}: already submitted as job 1000; stage a new attempt (submit the plan) "
                "to run it again"]) == (again.returncode, again.stderr.splitlines())
    assert 1 == len(fake_slurm.calls("sbatch"))


def test_submit_refuses_an_attempt_of_another_workspace(dd_slurm_exe, fake_slurm, tmp_path) -> None:
    """The attempt dir must be one of the workspace's attempts."""
    env = {"PATH": "/usr/bin:/bin", "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    attempt = run(dd_slurm_exe + ["stage", _plan(tmp_path), "-w", str(tmp_path / "ws")], env=env).stdout.strip()
    out = run(dd_slurm_exe + ["submit", attempt, "-w", str(tmp_path / "other")], env=env)
    assert (2, 0) == (out.returncode, len(fake_slurm.calls("sbatch")))
    assert "not an attempt of workspace" in out.stderr


@pytest.mark.timeout(60)
def test_ctrl_c_in_watch_says_the_job_keeps_running(dd_slurm_exe, fake_slurm, tmp_path, clean_env) -> None:
    """Ctrl-C (SIGINT) while `status --watch` follows a running job stops the watching only: exit
    130 and one line (not an error) saying the job stays queued or running and how to cancel it; no scancel."""
    import signal
    import time

    from tests.control.test_submit_status import fake_job, staged

    attempt = staged(tmp_path, "1000")
    fake_job(fake_slurm, "1000", state="RUNNING")
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}
    watch = subprocess.Popen(dd_slurm_exe + ["status", "--watch", "--interval", "0.2", str(attempt)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not fake_slurm.calls("squeue") and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.send_signal(signal.SIGINT)
    _out, err = watch.communicate(timeout=30)
    assert (130, f"stopped watching; job 1000 stays queued or running (dd-slurm cancel {attempt} cancels it)\n", []) == (
        watch.returncode, err, fake_slurm.calls("scancel"))
