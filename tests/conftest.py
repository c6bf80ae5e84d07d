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
