"""The fake cluster's teardown does what a job's end does on a real one: it ends the job's steps
too, so a test that stops while its attempt's steps run leaves no server or gateway behind."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

pytestmark = pytest.mark.timeout(60)


def _step(fake_slurm, env: dict) -> tuple[subprocess.Popen, int]:
    """A fake srun step running `sleep 60` in its own session (as the runtime starts steps), and its task's pid."""
    srun = subprocess.Popen([str(fake_slurm.bin_dir / "srun"), "--jobid=1000", "--nodes=1", "--ntasks=1",
                             "--nodelist=n1", f"--export={','.join(env)}", "/bin/sleep", "60"],
                            env={**env, "PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not fake_slurm.snapshot().get("steps") and time.monotonic() < deadline:
        time.sleep(0.05)
    (task,) = next(iter(fake_slurm.snapshot()["steps"].values()))
    return srun, task


def test_the_end_of_the_fake_jobs_ends_the_steps_of_this_test_only(fake_slurm, tmp_path) -> None:
    """A step whose task carries this test's tmp path is killed, srun and task; the same step
    marked with another test's path (a pid that may belong to someone else by now), even one that
    this test's path is a prefix of (`test_x1` and `test_x10`), is left alone."""
    ours, our_task = _step(fake_slurm, {"DD_SLURM_ATTEMPT_DIR": str(tmp_path / "ws" / "attempts" / "a")})
    fake_slurm.end_everything(str(tmp_path))
    ended = (ours.wait(10), _gone_within(our_task, 10))
    fake_slurm.reset()
    theirs, their_task = _step(fake_slurm, {"DD_SLURM_ATTEMPT_DIR": f"{tmp_path}0/ws/attempts/a"})
    fake_slurm.end_everything(str(tmp_path))
    time.sleep(0.3)
    spared = (theirs.poll(), _alive(their_task))
    os.killpg(theirs.pid, 9)
    theirs.wait(10)
    assert ((-9, True), (None, True)) == (ended, spared)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    """Whether the SIGKILLed task is gone (or a zombie) within `seconds`: on a loaded machine the
    kernel may take a moment after its srun has already been reaped."""
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)
