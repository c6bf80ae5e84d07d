"""How big `make bench` measures: the full bench, or its quick mode (`python -m tests.bench.bench
--quick`): tiny inputs, one run of every row, no figure judged, no reference installed (a fresh
machine has neither the reference package nor nginx). `make test` runs the quick mode so that a
broken bench cannot land."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    quick: bool
    parse_rows: int
    runs: int  # timing repeats of the cheap rows
    jobs: tuple[int, ...]  # jobs per status round
    array_ids: tuple[int, ...]  # array task ids per status round
    history_rows: int
    runtime_runs: int
    soak_count: int
    array_shards: int
    finished_attempts: int
    big_nodes: int  # the big allocation: nodes x 8 GPUs, 2 replicas per node, nodes // 8 two-node pairs
    gateway_runs: int
    gateway_concurrency: tuple[int, ...]
    gateway_seconds: float

    @property
    def clusters_down(self) -> bool:
        """The test run says the lab clusters are down: the quick mode skips their rows."""
        return self.quick and os.environ.get("DD_SLURM_TEST_CLUSTER") == "down"


FULL = Sizes(False, 100_000, 10, (1, 100, 10_000), (10_000, 50_000), 100_000, 3, 30, 1000, 10_000, 64, 5, (64, 256),
             3.0)
QUICK = Sizes(True, 1000, 1, (1, 100), (1000,), 100, 1, 1, 10, 50, 4, 1, (16,), 0.3)
