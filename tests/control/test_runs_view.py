"""A run's status text: one summary line for the run, and `--watch` prints only what changed."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from dd_slurm.control.runs_view import changed_lines, run_status_text, shard_summary


def shard(index: int, state: str, job: Optional[str], outcome: Optional[str] = None) -> dict[str, Any]:
    return {"shard": index, "attempt": {"id": f"r-s{index:04d}", "dir": f"/ws/attempts/r-s{index:04d}", "state": state},
            "scheduler": None if job is None else {"job_id": f"9_{index}", "state": job, "reason": None},
            "effective": None if outcome is None else {"outcome": outcome, "reason": "ok"}}


def view(*shards: dict[str, Any]) -> dict[str, Any]:
    return {"run": {"run_id": "r", "num_shards": len(shards), "job_id": "9"}, "shards": list(shards)}


@pytest.mark.parametrize(("shards", "expected"), [
    ([shard(0, "done", "completed", "succeeded"), shard(1, "done", "completed", "succeeded"),
      shard(2, "done", "failed", "failed"), shard(3, "client", "running")], "done 2/4, failed 1, running 1"),
    ([shard(0, "staged", None), shard(1, "staged", "pending")], "done 0/2, pending 1, staged 1"),
    ([shard(0, "done", "timeout", "timed_out"), shard(1, "staged", "cancelled", "cancelled"),
      shard(2, "staged", "accounting_lag")], "done 0/3, timed_out 1, cancelled 1, accounting_lag 1"),
])
def test_the_summary_counts_every_shard_once(shards: list, expected: str) -> None:
    """Succeeded shards count as done out of all; the rest by outcome, else by their job's state,
    else staged; every shard is counted exactly once."""
    assert expected == shard_summary(view(*shards))


def test_status_of_a_run_ends_with_its_summary() -> None:
    """`status RUN` as text: the run, one line per shard, the summary."""
    text = run_status_text(view(shard(0, "done", "completed", "succeeded"), shard(1, "client", "running")))
    assert ["run r: 2 shards, array job 9", "  r-s0000: done | job 9_0 completed => succeeded (ok)",
            "  r-s0001: client | job 9_1 running", "done 1/2, running 1"] == text.splitlines()


def test_watch_prints_only_the_shards_that_changed() -> None:
    """First round: the run, every shard and the summary; a round where nothing changed prints
    nothing; then only the shard that moved, and the summary with the time since submission."""
    shown: dict[str, str] = {}
    first = view(shard(0, "client", "running"), shard(1, "staged", "pending"))
    assert ["run r: 2 shards, array job 9", "  r-s0000: client | job 9_0 running",
            "  r-s0001: staged | job 9_1 pending", "[0:00:05]  done 0/2, running 1, pending 1"] == \
        changed_lines(first, shown, 5.0)
    assert [] == changed_lines(first, shown, 7.0)
    second = view(shard(0, "done", "completed", "succeeded"), shard(1, "staged", "pending"))
    assert ["  r-s0000: done | job 9_0 completed => succeeded (ok)", "[0:01:10]  done 1/2, pending 1"] == \
        changed_lines(second, shown, 70.0)
