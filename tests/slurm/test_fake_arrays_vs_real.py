"""The fake's job arrays stay honest: one running, throttled array through dd-slurm's own client,
on fake and on real Slurm, observed at the same two moments, normalize identically."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from dd_slurm.clock import Clock
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.scheduler.observe import LagClock, index_rows, observe
from dd_slurm.testing.fake_slurm import install
from tests.scheduler.scenario import read_or_empty
from tests.slurm.conftest import wait_until


def observed(commands: SlurmCommands, job: str, since: float) -> list[tuple]:
    result = commands.query([job], since)  # a reused job id's older rows left out
    sacct = index_rows(result.sacct) if result.sacct is not None else None
    found = observe([job], index_rows(result.squeue), sacct, LagClock(Clock().wall(), 300))
    return [(o.job_id.replace(job, "J"), o.state, o.terminal, o.exit_code, o.signal, o.reason) for o in found]


def settle(commands: SlurmCommands, job: str, since: float, wanted, seconds: float = 150) -> list[tuple]:
    deadline = time.monotonic() + seconds
    while True:
        now = observed(commands, job, since)
        if wanted(now):
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"array never settled: {now}")
        time.sleep(0.5)


def scenario(commands: SlurmCommands, directory: Path, name: str) -> tuple[list[tuple], list[tuple]]:
    script = directory / "array.sh"
    script.write_text(f'#!/bin/bash\n#SBATCH --job-name="{name}"\n#SBATCH --array=0-3%2\n'
                      f'#SBATCH --output="{directory}/out-%A_%4a.log"\necho started\nexec sleep 300\n')
    since = time.time()
    job = commands.submit(script, name).job_id
    running = settle(commands, job, since, lambda obs: [o[1] for o in obs] == ["running", "running", "pending", "pending"])
    # RUNNING in the queue comes before the task's batch script runs (under load, seconds before):
    # cancelled in between, a task ends with no signal. The line each script writes says it runs.
    started = [directory / f"out-{job}_{task:04d}.log" for task in (0, 1)]
    wait_until(lambda: all("started" in read_or_empty(path) for path in started), 60, "the two running tasks' scripts")
    commands.cancel(job)
    ended = settle(commands, job, since, lambda obs: all(o[1] == "cancelled" and o[3] is not None for o in obs)
                   and all(o[4] == 15 for o in obs[:2]))
    return running, ended


@pytest.mark.timeout(400)
def test_fake_arrays_normalize_exactly_like_real_slurm(tmp_path, job_prefix, real_commands) -> None:
    """`--array=0-3%2`: two tasks running and two pending on JobArrayTaskLimit, then after
    `scancel J` all four cancelled (the running ones by signal 15, the pending range with them)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "fake").mkdir()
    real = scenario(real_commands, tmp_path / "real", f"{job_prefix}array")
    fake_slurm = install(tmp_path / "bin")
    fake = scenario(SlurmCommands(Clock(), str(fake_slurm.bin_dir), {}), tmp_path / "fake", f"{job_prefix}array")
    assert real == fake
