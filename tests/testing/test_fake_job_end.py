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
    theirs = subprocess.Popen(["/bin/sleep", "60"], start_new_session=True, stdin=subprocess.DEVNULL,
                              env={"PATH": "/usr/bin:/bin", "DD_SLURM_ATTEMPT_DIR": f"{tmp_path}0/ws/attempts/a"})
    with fake_slurm.edit() as state:  # its pid recorded as one of this test's step tasks, as a reused pid would be
        state["steps"] = {"1000.0": [theirs.pid]}
    fake_slurm.end_everything(str(tmp_path))
    time.sleep(0.3)
    spared = (theirs.poll(), _alive(theirs.pid))
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


def test_a_step_not_yet_recorded_ends_with_the_job_too(fake_slurm, tmp_path) -> None:
    """An srun the supervisor started just before the test ended has not written its pid into
    the fake's state yet (seen: an orphaned gateway step waiting forever for its config): a
    process of this test's (its tmp path on its command line, in a session of its own) is ended
    all the same, srun and child."""
    script = tmp_path / "srun-like"
    script.write_text("import subprocess, sys\nsubprocess.run(['/bin/sleep', '60'])\n")
    srun = subprocess.Popen(["/usr/bin/python3", str(script)], start_new_session=True)
    deadline = time.monotonic() + 20
    while not _children(srun.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    (child,) = _children(srun.pid)
    fake_slurm.end_everything(str(tmp_path))
    assert (-9, True) == (srun.wait(10), _gone_within(child, 10))


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []
