"""What each lab cluster's process tracking does with a daemon that escaped its step (a process
that double-forks into its own session with an empty environment): proctrack/cgroup kills it when
the step ends; proctrack/linuxproc loses it (dd-slurm's leftover scan finds such daemons by the
step's recorded process tree, tests/slurm/test_runtime_real.py)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.conftest import ROOT

ESCAPE = ROOT / "fixtures" / "cluster" / "escape_daemon.py"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def proctrack_type(cluster) -> str:
    out = subprocess.run([cluster.tool("scontrol"), "show", "config"], capture_output=True, text=True, timeout=30)
    return next(line.split("=", 1)[1].strip() for line in out.stdout.splitlines() if line.startswith("ProctrackType"))


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_an_escaped_daemon_outlives_its_step_only_without_cgroup_tracking(tmp_path, cluster, job_prefix) -> None:
    """The cluster runs the ProctrackType that versions.tsv names for it, and a step whose task
    double-forks a daemon and exits ends on its own; 10 s later (KillWait is 5 s) the daemon is dead
    on a proctrack/cgroup cluster and still alive on a proctrack/linuxproc one."""
    pidfile = tmp_path / "escaped.pid"
    step = subprocess.run([cluster.tool("srun"), "-N1", "-n1", "-t", "1", f"--job-name={job_prefix}escape", "python3",
                           str(ESCAPE), str(pidfile)], capture_output=True, text=True, timeout=60, env=cluster.env())
    assert (0, f"daemon {pidfile.read_text() if pidfile.exists() else '?'}\n") == (step.returncode, step.stdout), \
        step.stderr  # the task ended only after the daemon had written its pid file
    pid = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        expected = (f"proctrack/{cluster.proctrack}", 0, cluster.proctrack != "cgroup")
        assert expected == (proctrack_type(cluster), step.returncode, alive(pid)), step.stderr
    finally:
        if alive(pid):
            os.kill(pid, 9)
