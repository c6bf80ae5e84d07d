"""The randomized soak on the real cluster (tests/slurm/soak.py): N attempts, one random fault each."""

from __future__ import annotations

import os
import random

import pytest

from tests.slurm.soak import soak, summary

# Attempts per cluster: the full soak on the proctrack/cgroup cluster (how most GPU sites track
# processes), a shorter one on each other release; DD_SLURM_SOAK_N overrides both.
FULL, SHORT = 30, 10


@pytest.mark.timeout(600)
def test_randomized_soak(tmp_path, cluster) -> None:
    """Every attempt's effective outcome agrees with its fault and when it landed, journals and
    records parse, and no process of any attempt is left on any node. Prints N/N and the seed."""
    seed = int(os.environ.get("DD_SLURM_SOAK_SEED") or random.randrange(2 ** 31))
    count = int(os.environ.get("DD_SLURM_SOAK_N") or (FULL if cluster.proctrack == "cgroup" else SHORT))
    done, left = soak(tmp_path, count, seed)
    report = summary(done, left, seed)
    print(report)
    assert (count, []) == (sum(1 for t in done if not t.problems), left), report
