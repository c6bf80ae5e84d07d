"""Slurm's SIGTERM at the time limit (no pre-timeout signal) is timed_out/time_limit; any other
SIGTERM (scancel) stays cancelled/sigterm. The supervisor asks squeue for the job's reason."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.scheduler.render import interpreter
from tests.faults.matrix import SLOW_CLIENT, wait_for_state
from tests.runtime.harness import NODES, allocation_env, no_leftovers, outcome, plan_data, stage_plan


@pytest.mark.parametrize(("signo", "at_limit", "expected", "asked"), [
    (signal.SIGTERM, True, ("timed_out", "time_limit"), 1),
    (signal.SIGTERM, False, ("cancelled", "sigterm"), 1),
    (signal.SIGUSR1, True, ("timed_out", "pre_timeout_signal"), 0),
    (signal.SIGINT, True, ("cancelled", "sigint"), 0),
])
def test_sigterm_is_a_time_limit_only_when_slurm_says_so(signo, at_limit, expected, asked) -> None:
    """The gate asks whether the job reached its time limit only for SIGTERM, and only once."""
    questions = []
    gate = SignalGate(time_limit=lambda: questions.append(1) or at_limit).install()
    try:
        os.kill(os.getpid(), signo)
        with pytest.raises(AttemptFailure) as caught:
            gate.check()
        assert (expected, asked) == ((caught.value.outcome, caught.value.reason), len(questions))
    finally:
        gate.uninstall()


def _supervise(tmp_path, fake_slurm, reason: str):
    data = plan_data("single-node")
    SLOW_CLIENT(data)
    staged = stage_plan(tmp_path, data)
    with fake_slurm.edit() as state:  # the allocation the supervisor runs in, as squeue reports it
        state["jobs"]["4242"] = {"id": "4242", "name": staged.job_name, "held": False, "array": None, "pid": None,
                                 "cancelled_by": None, "in_squeue": True, "in_sacct": True, "state": "COMPLETING",
                                 "reason": reason, "exit": None}
    env = allocation_env(fake_slurm.bin_dir, NODES[:1], data["job"]["gpus_per_node"])
    argv = [*interpreter(data["runtime"]["python"], entry_sha256(), staged.bundle_digest), str(staged.bundle_dir / "entry.py"),
            "run", str(staged.attempt_dir), "--bundle-digest", staged.bundle_digest, "--plan-digest", staged.plan_digest]
    supervisor = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for_state(staged.attempt_dir, "client", 30, time.sleep)
        supervisor.send_signal(signal.SIGTERM)
        output, _ = supervisor.communicate(timeout=60)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    return staged, supervisor.returncode, output


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("reason", "expected"), [("TimeLimit", ("timed_out", "time_limit")),
                                                  ("None", ("cancelled", "sigterm"))])
def test_a_supervisor_ended_at_the_time_limit_records_timed_out(tmp_path, fake_slurm, reason, expected) -> None:
    """SIGTERM while squeue gives the job's reason as TimeLimit: timed_out/time_limit; with no
    such reason (a scancel): cancelled/sigterm. Either way run exits 4 and nothing is left."""
    staged, code, output = _supervise(tmp_path, fake_slurm, reason)
    assert (4, expected) == (code, outcome(staged.attempt_dir)), output
    assert [] == no_leftovers(staged.attempt_id)
