"""The control plane on the real cluster: sbatch that creates the job then reports a transport
error, a supervisor killed with SIGKILL, a job reaching its time limit, raw ids of array tasks,
and a finished attempt's status from disk alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.faults.matrix import client_args
from tests.runtime.harness import outcome, plan_data
from tests.slurm.conftest import wait_until, write_script
from tests.slurm.real_attempt import CLUSTER, EXE, submit, wait_job_gone, wait_state

TOOLS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "srun")


def _tool(name: str) -> str:
    """This test's lab cluster's tool (the `cluster` fixture sets it for every real test)."""
    return CLUSTER["current"].tool(name)


def _env(**extra: str) -> dict:
    return {**CLUSTER["current"].env(), **extra}


def lossy_sbatch_dir(tmp_path: Path) -> Path:
    """DD_SLURM_BIN_DIR where every tool is the real one, except that sbatch runs the real sbatch
    and then reports `Socket timed out` and exits 1: the job exists, its id was lost."""
    bin_dir = tmp_path / "lossy-bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        real = _tool(tool)
        assert real, f"{tool} not on PATH"
        if tool == "sbatch":
            (bin_dir / tool).write_text(f'#!/bin/bash\n"{real}" "$@" >/dev/null\n'
                                        'echo "sbatch: error: Socket timed out on send/recv operation" >&2\nexit 1\n')
            (bin_dir / tool).chmod(0o755)
        else:
            os.symlink(real, bin_dir / tool)
    return bin_dir


def jobs_named(name: str) -> set[str]:
    queued = subprocess.run([_tool("squeue"), "-h", "--states=all", f"--name={name}", "-o", "%F"], capture_output=True,
                            text=True, timeout=30).stdout.split()
    accounted = subprocess.run([_tool("sacct"), "-n", "-X", "-P", f"--name={name}", "--starttime=now-1hour", "-o", "JobID"],
                               capture_output=True, text=True, timeout=30).stdout.split()
    return set(queued) | {j.split("_")[0] for j in accounted}


@pytest.mark.timeout(180)
def test_sbatch_that_loses_its_answer_gives_exactly_one_adopted_job(tmp_path) -> None:
    """sbatch creates the job and then says `Socket timed out`: submit adopts that job by its
    unique name (exactly one job of that name exists), records how, and says so."""
    env = _env(DD_SLURM_BIN_DIR=str(lossy_sbatch_dir(tmp_path)))
    attempt_dir, job_id = submit(tmp_path, plan_data("single-node"), "lossy-sbatch", env=env)
    record = json.loads((attempt_dir / "attempt.json").read_text())
    assert ({job_id}, True) == (jobs_named(record["job_name"]), record["submission"]["adopted"])
    assert [] == record["submission"]["duplicates_cancelled"]
    wait_state(attempt_dir, ("done",), 150)
    assert ("succeeded", "ok") == outcome(attempt_dir)


def supervisor_pid(attempt_id: str) -> int | None:
    """The `run` process of this attempt, found by the DD_SLURM_ATTEMPT_ID in its environment."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"DD_SLURM_ATTEMPT_ID={attempt_id}".encode() in environ and b"run" in argv and \
                any(a.endswith(b"entry.py") for a in argv):
            return int(proc.name)
    return None


def status_json(attempt_dir: Path) -> dict:
    out = subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True, timeout=60,
                         env=_env())
    assert 0 == out.returncode, out.stderr
    return json.loads(out.stdout)


@pytest.mark.timeout(180)
def test_a_supervisor_killed_with_sigkill_is_supervisor_lost(tmp_path) -> None:
    """SIGKILL to the supervisor while its client runs: the job ends, the attempt stays in
    `client`, and the first status round after the job ended says effective failed/
    supervisor_lost from the scheduler, with readiness shown stale."""
    data = plan_data("single-node")
    client_args("--sleep", "60")(data)
    attempt_dir, job_id = submit(tmp_path, data, "sigkill")
    wait_state(attempt_dir, ("client",), 120)
    assert None is status_json(attempt_dir)["effective"]
    pid = wait_until(lambda: supervisor_pid(attempt_dir.name), 10, "the supervisor process")
    os.kill(pid, signal.SIGKILL)
    wait_job_gone(job_id)
    view = status_json(attempt_dir)
    assert ("client", {"outcome": "failed", "reason": "supervisor_lost", "from": "scheduler"}) == (
        view["attempt"]["state"], view["effective"])
    text = subprocess.run(EXE + ["status", str(attempt_dir)], capture_output=True, text=True, timeout=60,
                          env=_env()).stdout
    assert "supervisor_lost" in text and "[stale: its supervisor is gone]" in text


@pytest.mark.timeout(300)
def test_a_job_reaching_its_time_limit_is_timed_out(tmp_path) -> None:
    """No pre-timeout signal and a client that outlives the one-minute limit: Slurm's SIGTERM at
    the limit ends the attempt timed_out/time_limit (sacct: TIMEOUT), not cancelled."""
    data = plan_data("single-node")
    data["job"].update(time_limit="00:01:00", pre_timeout_signal_s=0)
    data["client"]["timeout_s"] = None
    client_args("--sleep", "600")(data)
    attempt_dir, job_id = submit(tmp_path, data, "time-limit")
    wait_state(attempt_dir, ("done",), 240)
    assert ("timed_out", "time_limit") == outcome(attempt_dir)
    view = wait_until(lambda: (lambda v: v if v["scheduler"]["terminal"] else None)(status_json(attempt_dir)), 90,
                      "the job's end")
    assert {"outcome": "timed_out", "reason": "time_limit", "from": "attempt"} == view["effective"]


@pytest.mark.timeout(120)
def test_query_by_the_raw_id_of_an_array_task(tmp_path, job_prefix, real_commands) -> None:
    """An array task has its own raw job id: `query RAW` answers for that task (`J_0`), not lost."""
    script = write_script(tmp_path, "arr", "sleep 30", f"--job-name={job_prefix}raw", "--array=0-1",
                          f"--output={tmp_path}/arr-%A_%a.out")
    job = real_commands.submit(script, f"{job_prefix}raw").job_id

    def task_with_own_id():  # the last task to start takes the array's own id; the others get new ones
        out = subprocess.run([_tool("squeue"), "-h", "-j", job, "-o", "%i|%A|%T"], capture_output=True,
                             text=True).stdout
        rows = [line.split("|") for line in out.split()]
        return next(((task, raw) for task, raw, state in rows if state == "RUNNING" and raw != job), None)

    task, raw = wait_until(task_with_own_id, 60, "a running task with its own raw id")
    out = subprocess.run(EXE + ["query", "--json", raw], capture_output=True, text=True, timeout=60, env=_env())
    found = json.loads(out.stdout)
    assert [(task, "running", "squeue")] == [(o["job_id"], o["state"], o["source"]) for o in found]


@pytest.mark.timeout(120)
def test_a_finished_attempt_needs_no_scheduler_call(tmp_path) -> None:
    """Once sacct's terminal record is persisted, status answers from disk: with every Slurm tool
    made to fail, status of the finished attempt still exits 0 with the same observation."""
    data = plan_data("single-node")
    data["runtime"]["python"] = "/bin/false"  # the job fails at once
    attempt_dir, job_id = submit(tmp_path, data, "finished")
    first = wait_until(lambda: (lambda v: v if v["scheduler"]["source"] == "sacct" else None)(status_json(attempt_dir)),
                       60, "sacct's record")
    broken = tmp_path / "broken-bin"
    broken.mkdir()
    for tool in TOOLS:
        (broken / tool).write_text("#!/bin/sh\necho \"$0 must not be called\" >&2\nexit 1\n")
        (broken / tool).chmod(0o755)
    out = subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True, timeout=60,
                         env=_env(DD_SLURM_BIN_DIR=str(broken)))
    assert (0, first["scheduler"], "") == (out.returncode, json.loads(out.stdout)["scheduler"], out.stderr)
