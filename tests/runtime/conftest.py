"""Fixtures shared by the runtime tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Throwaway processes a test appends here: each is killed and waited for at teardown."""
    procs: list[subprocess.Popen] = []
    yield procs
    for popen in procs:
        popen.kill()
        popen.wait()
