"""Shared fixtures. Real-Slurm wiring lives in tests/slurm/conftest.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
PLANS = FIXTURES / "plans"

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


@pytest.fixture
def clock():
    from dd_slurm.clock import FakeClock

    return FakeClock()


@pytest.fixture
def dd_slurm_exe() -> list[str]:
    """The console script of this checkout, as an argv prefix."""
    exe = Path(sys.executable).parent / "dd-slurm"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dd_slurm"]


@pytest.fixture
def clean_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "HOME": os.environ.get("HOME", "/")}


def cluster_wanted() -> str:
    """`up`: run the real-Slurm tests; `down`: skip them (fail instead when CI=true)."""
    return os.environ.get("DD_SLURM_TEST_CLUSTER", "up")


def pytest_configure(config) -> None:
    if cluster_wanted() == "up":
        from tests.slurm.clusters import configure

        configure(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist: each worker gets the controller's answer to which clusters are up."""
    from tests.slurm.clusters import ERROR_KEY, KEY

    for key in (KEY, ERROR_KEY):
        node.workerinput[key] = getattr(node.config, key, "")


def timeout_of(item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker and marker.args else 0.0


def pytest_collection_modifyitems(config, items) -> None:
    slurm_dir = ROOT / "tests" / "slurm"
    for item in items:
        if slurm_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)
    # The longest tests first (by their own timeout, which is sized to them), handed out two at a
    # time (`make test` runs xdist with --maxschedchunk 2): the workers then finish together
    # instead of one running a three-minute test after the others are done.
    # The cluster_fault tests stay in file order: they stop and start daemons, and each expects the
    # cluster as the one before it left it.
    items.sort(key=lambda item: 0.0 if "cluster_fault" in item.keywords else -timeout_of(item))
    if cluster_wanted() == "up":
        return
    if os.environ.get("CI") == "true":
        raise pytest.UsageError("CI=true but the Slurm cluster is down: the real-Slurm tests must run in CI")
    skip = pytest.mark.skip(reason="DD_SLURM_TEST_CLUSTER=down: the local Slurm cluster is not running")
    for item in items:
        if "slurm" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fake_slurm(tmp_path):
    """Fake Slurm executables in a fresh bin dir, and the handle that scripts them."""
    from dd_slurm.testing.fake_slurm import install

    fake = install(tmp_path / "fake-bin")
    yield fake
    fake.end_everything(str(tmp_path))


@pytest.fixture
def fake_commands(fake_slurm, clock):
    from dd_slurm.scheduler.commands import SlurmCommands

    return SlurmCommands(clock, str(fake_slurm.bin_dir), {}, timeout_s=10, backoff_s=0.01)
