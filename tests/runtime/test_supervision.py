"""One supervisor per attempt: the lock in the attempt dir, its stale detection, and the refusals
of `run`/`advance` that leave the attempt as it was."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from dd_slurm.runtime.supervision import Holder, SupervisionRefused, SupervisorLock
from dd_slurm.store.attempt_files import SUPERVISOR_LOCK
from tests.faults.matrix import SLOW_CLIENT, wait_for_state
from tests.runtime.harness import allocation_env, journal, plan_data, read, stage_plan, supervisor_argv
from tests.runtime.test_run_fake import HAPPY

DEAD_PID = 2 ** 22 + 17  # above any pid_max default: never a live process


def _holder(**changes) -> Holder:
    me = Holder.me("run", {"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n1"})
    fields = {**me.to_json(), **changes}
    return Holder(**fields)


def _lock_file(directory, holder: Holder) -> None:
    (directory / SUPERVISOR_LOCK).write_text(json.dumps(holder.to_json()))


LIVE_CASES = [  # (holder, what Slurm says of its job, refused?)
    ({"pid": DEAD_PID}, None, False),  # same machine, pid gone: stale
    ({"start_time": 1}, None, False),  # same machine, pid reused by another process: stale
    ({}, None, True),  # same machine, this very process: live
    ({"host": "elsewhere", "pid": DEAD_PID}, True, True),  # another machine, its job runs: live
    ({"host": "elsewhere", "pid": DEAD_PID}, False, False),  # another machine, its job ended: stale
    ({"host": "elsewhere", "pid": DEAD_PID}, None, True),  # Slurm cannot say: the lock stands
    ({"boot_id": "rebooted", "pid": os.getpid()}, False, False),  # same host, another boot: ask Slurm
]


@pytest.mark.parametrize("changes, job_live, refused", LIVE_CASES)
def test_lock_stale_detection(tmp_path, changes, job_live, refused) -> None:
    """A present lock is replaced only when its holder is certainly gone: by pid and start time on
    the same machine, by Slurm's answer for a holder elsewhere; an unknown answer refuses."""
    _lock_file(tmp_path, _holder(**changes))
    lock = SupervisorLock(tmp_path, Holder.me("advance", {"SLURM_JOB_ID": "78"}), lambda job: job_live)
    if refused:
        with pytest.raises(SupervisionRefused, match="already supervised by `run` pid"):
            lock.acquire()
        return
    lock.acquire()
    assert lock.me == Holder.parse((tmp_path / SUPERVISOR_LOCK).read_bytes())
    lock.release()
    assert not (tmp_path / SUPERVISOR_LOCK).exists()


def test_a_held_flock_is_live_without_asking(tmp_path) -> None:
    """The fast path: a holder that has the lock flocked is live, even if its record looks stale."""
    first = SupervisorLock(tmp_path, Holder.me("run", {"SLURM_JOB_ID": "1"}), lambda job: False)
    first.acquire()
    data = json.loads((tmp_path / SUPERVISOR_LOCK).read_text())
    data.update(host="elsewhere", pid=DEAD_PID)
    (tmp_path / SUPERVISOR_LOCK).write_text(json.dumps(data))  # same inode: the flock stays
    second = SupervisorLock(tmp_path, Holder.me("advance", {"SLURM_JOB_ID": "1"}), lambda job: False)
    with pytest.raises(SupervisionRefused):
        second.acquire()
    first.release()


def test_a_malformed_lock_refuses(tmp_path) -> None:
    """A lock file that is not a holder record is not guessed at: refused, one line naming it."""
    (tmp_path / SUPERVISOR_LOCK).write_text("{not json")
    with pytest.raises(SupervisionRefused, match="not a supervisor lock record"):
        SupervisorLock(tmp_path, Holder.me("run", {}), lambda job: False).acquire()


def _cli(dd_slurm_exe, args, env):
    return subprocess.run(dd_slurm_exe + args, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(120)
def test_a_second_supervisor_is_refused_and_the_first_finishes(tmp_path, fake_slurm, dd_slurm_exe) -> None:
    """While the job's supervisor runs the client, `advance` (and `run`) in the same allocation
    exit 2 with one line naming the holder; the first supervisor's attempt ends succeeded with
    its journal whole and its server stopped gracefully, not SIGKILLed by a second supervisor."""
    data = plan_data("single-node")
    SLOW_CLIENT(data)
    staged = stage_plan(tmp_path, data)
    env = allocation_env(fake_slurm.bin_dir, ("127.0.2.1",), 1)
    first = subprocess.Popen(supervisor_argv(staged, data), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for_state(staged.attempt_dir, "client", 60, time.sleep)
        pid = json.loads((staged.attempt_dir / "supervisor.json").read_text())["pid"]
        for command in (["advance", str(staged.attempt_dir)], ["run", str(staged.attempt_dir)]):
            second = _cli(dd_slurm_exe, command, {**env, "PATH": "/usr/bin:/bin"})
            assert (2, 1) == (second.returncode, len(second.stderr.splitlines())), second.stderr
            assert f"already supervised by `run` pid {pid} on 127.0.2.1" in second.stderr
        output, _ = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert 0 == first.returncode, output
    assert HAPPY == journal(staged.attempt_dir)
    server = next(p for p in read(staged.attempt_dir, "cleanup.json")["processes"] if p["name"] == "deploy-small-0")
    assert server["how"].startswith("stopped by SIGTERM"), server
    assert not (staged.attempt_dir / SUPERVISOR_LOCK).exists()


REFUSALS = [  # (arguments after the attempt dir, in an allocation?, what the one line says)
    ([], False, "not inside a Slurm allocation"),
    (["--until", "deploying"], True, "--until deploying: the attempt's processes would keep running"),
    (["--until", "client"], True, "--until client"),
]


@pytest.mark.parametrize("extra, in_allocation, message", REFUSALS)
def test_advance_refusals_leave_the_attempt_unchanged(tmp_path, fake_slurm, dd_slurm_exe, extra, in_allocation,
                                                      message) -> None:
    """Outside an allocation, or with an --until that would leave processes unsupervised: exit 2,
    one line, and the attempt dir exactly as staged (no journal, no supervisor record, no lock)."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    before = sorted(p.name for p in staged.attempt_dir.iterdir())
    env = allocation_env(fake_slurm.bin_dir, ("127.0.2.1",), 1) if in_allocation else {"PATH": "/usr/bin:/bin"}
    done = _cli(dd_slurm_exe, ["advance", str(staged.attempt_dir), *extra], {**env, "PATH": "/usr/bin:/bin"})
    assert (2, 1) == (done.returncode, len(done.stderr.splitlines())), done.stderr
    assert message in done.stderr
    assert before == sorted(p.name for p in staged.attempt_dir.iterdir())


@pytest.mark.timeout(120)
def test_a_stale_lock_of_a_killed_supervisor_is_taken_over(tmp_path, fake_slurm) -> None:
    """A supervisor SIGKILLed mid-flight leaves its lock; the next supervisor in the allocation sees
    the holder is gone, takes over, and ends the attempt supervisor_restarted through cleanup."""
    data = plan_data("single-node")
    SLOW_CLIENT(data)
    staged = stage_plan(tmp_path, data)
    env = allocation_env(fake_slurm.bin_dir, ("127.0.2.1",), 1)
    first = subprocess.Popen(supervisor_argv(staged, data), env=env, stdout=subprocess.DEVNULL)
    wait_for_state(staged.attempt_dir, "client", 60, time.sleep)
    first.kill()
    first.wait()
    assert (staged.attempt_dir / SUPERVISOR_LOCK).exists()
    again = subprocess.run(supervisor_argv(staged, data), env=env, capture_output=True, text=True, timeout=60)
    assert 4 == again.returncode, again.stderr
    assert ("client", "cleanup", "supervisor_restarted") == journal(staged.attempt_dir)[-2]
    assert "clean" == read(staged.attempt_dir, "cleanup.json")["verdict"]
