"""Real-cluster fixtures: every test runs once per lab cluster that is up (`cluster`, the Slurm
version in the test id), with unique job-name prefixes, cleanup of its jobs, a real client."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.slurm.clusters import Cluster, under_test


def pytest_generate_tests(metafunc) -> None:
    """Every real-cluster test runs on each Slurm release that is up: test_x[24.11]."""
    if "cluster" in metafunc.fixturenames:
        clusters = under_test(metafunc.config)
        metafunc.parametrize("cluster", clusters, ids=[c.version for c in clusters])


def pytest_collection_modifyitems(items) -> None:
    """A cluster_fault test stops daemons of its own cluster only: with `--dist loadgroup` each
    cluster's run one after another on one worker, while different clusters' run side by side."""
    for item in items:
        params = getattr(item, "callspec", None) and item.callspec.params
        if "cluster_fault" in item.keywords and params and "cluster" in params:
            item.add_marker(pytest.mark.xdist_group(f"cluster-{params['cluster'].version}"))


def cancel_jobs_named(cluster: Cluster, *prefixes: str) -> None:
    out = subprocess.run([cluster.tool("squeue"), "--noheader", "--format=%A %j"], capture_output=True, text=True,
                         timeout=30)
    mine = [line.split()[0] for line in out.stdout.splitlines()
            if line.split() and line.split()[-1].startswith(prefixes)]
    if mine:
        subprocess.run([cluster.tool("scancel"), *mine], capture_output=True, timeout=30)


@pytest.fixture
def job_prefix(cluster) -> str:
    """A job-name prefix no other test uses; the test's jobs are cancelled at the end."""
    prefix = f"ddt-{uuid.uuid4().hex[:8]}-"
    yield prefix
    cancel_jobs_named(cluster, prefix)


@pytest.fixture(autouse=True)
def attempt_prefix(cluster) -> str:
    """Attempts submitted by this test are named t<random>-... and go to this test's cluster;
    whatever is still queued or running when the test ends is cancelled, so one test's failure
    cannot disturb another's jobs."""
    from tests.slurm import real_attempt

    prefix = f"t{uuid.uuid4().hex[:6]}-"
    real_attempt.PREFIX["current"] = prefix
    real_attempt.CLUSTER["current"] = cluster
    yield prefix
    cancel_jobs_named(cluster, f"dd-{prefix}")


@pytest.fixture
def real_commands(cluster):
    from dd_slurm.clock import Clock
    from dd_slurm.scheduler.commands import SlurmCommands

    return SlurmCommands(Clock(), cluster.bin_dir, {}, timeout_s=20, backoff_s=0.5)


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
