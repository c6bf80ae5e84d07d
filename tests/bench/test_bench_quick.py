"""`make bench` cannot break unseen: its quick mode (tiny inputs, one run of every row, no figure
judged) runs as part of `make test`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Rows the quick mode may leave without a figure, and why: it installs nothing (no reference
# package, no nginx), and the lab cluster's rows need the test run's clusters up.
MAY_SKIP = ("skipped: no reference (quick mode)", "skipped: nginx unavailable (the quick mode installs nothing)")
CLUSTERS_DOWN = "skipped: the test run's clusters are down (DD_SLURM_TEST_CLUSTER=down)"


@pytest.mark.timeout(400)
def test_the_quick_bench_completes_every_row(tmp_path: Path) -> None:
    """`python -m tests.bench.bench --quick` exits 0 and every row it reports has a figure, but
    for the rows it states a reason to skip (nothing installed; clusters down only when the test
    run says so). A benchmark that crashes fails this test, as `make bench` would."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "tests.bench.bench", "--quick", "--out", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=380)
    assert 0 == done.returncode, done.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text())
    allowed = MAY_SKIP + ((CLUSTERS_DOWN,) if os.environ.get("DD_SLURM_TEST_CLUSTER") == "down" else ())
    unmeasured = [(r["figure"], r["note"]) for r in report["rows"] if r["median"] is None]
    assert [] == [(figure, note) for figure, note in unmeasured if note not in allowed]
    assert report["machine"]["quick"] is True
    assert len(report["rows"]) >= 27
