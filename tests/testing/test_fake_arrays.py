"""The fake Slurm runs job arrays the way Slurm 22.05 does (checked against the lab cluster):
at most K tasks at once, each its own job id and SLURM_ARRAY_*, pending tasks as one range row,
cancelling the array cancels the pending range, a pending task cancelled alone leaves no trace."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from dd_slurm.scheduler.parse import SACCT_FIELDS_NO_RAW, parse_sacct, parse_squeue


def tool(fake, name: str, *args: str) -> str:
    done = subprocess.run([str(fake.bin_dir / name), *args], capture_output=True, text=True, timeout=30)
    assert 0 == done.returncode, done.stderr
    return done.stdout


def submit(fake, tmp_path: Path, body: str, spec: str) -> str:
    script = tmp_path / "array.sh"
    script.write_text(f"#!/bin/bash\n#SBATCH --job-name=arr\n#SBATCH --array={spec}\n"
                      f"#SBATCH --output={tmp_path}/out-%A_%4a.log\n{body}\n")
    return tool(fake, "sbatch", "--parsable", str(script)).strip()


def squeue(fake, job: str) -> list:
    return parse_squeue(tool(fake, "squeue", "--noheader", "--states=all", f"--jobs={job}", "--format=%i|%T|%r|%j"))


def wait_for(predicate, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition never held")


def test_throttle_runs_at_most_k_tasks_and_every_task_once(fake_slurm, tmp_path) -> None:
    """`--array=0-5%2` with 0.5 s tasks: never more than two RUNNING in any squeue sample, every
    task runs exactly once with its own SLURM_ARRAY_TASK_ID, and its output goes to `%4a`."""
    job = submit(fake_slurm, tmp_path, 'echo "$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT"; '
                 "sleep 0.5", "0-5%2")
    peak = 0
    while True:
        rows = squeue(fake_slurm, job)
        peak = max(peak, sum(r.raw_state == "RUNNING" for r in rows))
        if [r.raw_state for r in rows] == ["COMPLETED"] * 6:
            break
        time.sleep(0.1)
    outputs = {p.name: p.read_text().split() for p in tmp_path.glob("out-*.log")}
    assert 2 == peak
    assert {f"out-{job}_{i:04d}.log": [job, str(i), "6"] for i in range(6)} == outputs


def test_pending_tasks_show_as_one_range_row_like_slurm(fake_slurm, tmp_path) -> None:
    """While tasks 0 and 1 run, squeue shows them by id and the rest as `J_[2-5%2]` waiting on
    JobArrayTaskLimit (fixtures/slurm/squeue-array-throttled.json has the real shape)."""
    job = submit(fake_slurm, tmp_path, "sleep 30", "0-5%2")
    rows = wait_for(lambda: (r := squeue(fake_slurm, job)) and len(r) == 3 and r)
    assert [("0", "RUNNING", None), ("1", "RUNNING", None), ("[2-5%2]", "PENDING", "JobArrayTaskLimit")] == \
        [(r.task, r.raw_state, r.reason) for r in rows]
    tool(fake_slurm, "scancel", job)


def test_cancelling_the_array_ends_running_tasks_and_pending_never_start(fake_slurm, tmp_path) -> None:
    """scancel J: running tasks CANCELLED, the pending range CANCELLED too and never started."""
    job = submit(fake_slurm, tmp_path, "sleep 30", "0-3%2")
    wait_for(lambda: len(squeue(fake_slurm, job)) == 3)
    tool(fake_slurm, "scancel", job)
    rows = wait_for(lambda: (r := parse_sacct(tool(fake_slurm, "sacct", "--noheader", "--parsable2", f"--jobs={job}",
                                                   f"--format={SACCT_FIELDS_NO_RAW}"))) and r)
    assert [("0", "CANCELLED by 0"), ("1", "CANCELLED by 0"), ("[2-3%2]", "CANCELLED by 0")] == \
        [(r.task, r.raw_state.replace(str(os.getuid()), "0")) for r in rows]
    time.sleep(0.5)
    assert [f"out-{job}_0000.log", f"out-{job}_0001.log"] == sorted(p.name for p in tmp_path.glob("out-*.log"))


def test_a_pending_task_cancelled_alone_vanishes_and_the_next_one_runs(fake_slurm, tmp_path) -> None:
    """scancel J_2 while it is pending: Slurm 22.05 keeps no record of it; tasks 0, 1, 3 run.
    Tasks 0 and 1 hold both slots until the scancel is done (they wait for a file the test makes
    after it): with a fixed sleep, a loaded machine could start task 2 before the scancel came."""
    go = tmp_path / "go"
    job = submit(fake_slurm, tmp_path, f"while [ ! -e {go} ]; do sleep 0.05; done", "0-3%2")
    tool(fake_slurm, "scancel", f"{job}_2")
    go.touch()
    rows = wait_for(lambda: (r := squeue(fake_slurm, job)) and all(x.raw_state == "COMPLETED" for x in r) and r)
    assert ["0", "1", "3"] == [r.task for r in rows]
