"""Real-cluster fixtures: unique job-name prefixes, cleanup of each test's jobs, a real client."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT

CLUSTER = ROOT / "fixtures" / "cluster" / "cluster.sh"


def cluster(*args: str) -> None:
    subprocess.run(["bash", str(CLUSTER), *args], check=True, timeout=180, capture_output=True)


def cancel_jobs_named(*prefixes: str) -> None:
    out = subprocess.run(["squeue", "--noheader", "--format=%A %j"], capture_output=True, text=True, timeout=30)
    mine = [line.split()[0] for line in out.stdout.splitlines()
            if line.split() and line.split()[-1].startswith(prefixes)]
    if mine:
        subprocess.run(["scancel", *mine], capture_output=True, timeout=30)


@pytest.fixture
def job_prefix() -> str:
    """A job-name prefix no other test uses; the test's jobs are cancelled at the end."""
    prefix = f"ddt-{uuid.uuid4().hex[:8]}-"
    yield prefix
    cancel_jobs_named(prefix)


@pytest.fixture(autouse=True)
def attempt_prefix() -> str:
    """Attempts submitted by this test are named t<random>-...; whatever is still queued or running
    when the test ends is cancelled, so one test's failure cannot disturb another's jobs."""
    from tests.slurm import real_attempt

    prefix = f"t{uuid.uuid4().hex[:6]}-"
    real_attempt.PREFIX["current"] = prefix
    yield prefix
    cancel_jobs_named(f"dd-{prefix}")


@pytest.fixture
def real_commands():
    from dd_slurm.clock import Clock
    from dd_slurm.scheduler.commands import SlurmCommands

    return SlurmCommands(Clock(), None, {}, timeout_s=20, backoff_s=0.5)


def wait_until(predicate, seconds: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


def write_script(directory: Path, name: str, body: str, *directives: str) -> Path:
    script = directory / f"{name}.sh"
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), body]
    script.write_text("\n".join(lines) + "\n")
    return script
