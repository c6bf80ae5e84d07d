"""Normalization across squeue and sacct, and accounting lag as an explicit observation."""

from __future__ import annotations

import pytest

from dd_slurm.scheduler.observe import LagClock, index_rows, observe
from dd_slurm.scheduler.parse import parse_sacct, parse_squeue

LIVE_RUNNING = index_rows(parse_squeue("42|RUNNING|None|a\n"))
ACCT_DONE = index_rows(parse_sacct("42|COMPLETED|0:0|None|a\n"))
ACCT_RUNNING = index_rows(parse_sacct("42|RUNNING|0:0|None|a\n"))


def states(found):
    return [(o.job_id, o.state, o.terminal, o.source) for o in found]


def test_sacct_terminal_record_wins_over_squeue() -> None:
    """A terminal accounting record (with its exit code) beats a live squeue row."""
    found = observe(["42"], LIVE_RUNNING, ACCT_DONE, LagClock(100, 60))
    assert [("42", "completed", True, "sacct")] == states(found)


def test_live_job_comes_from_squeue() -> None:
    """While sacct says nothing terminal, squeue's state is the answer."""
    assert [("42", "running", False, "squeue")] == states(observe(["42"], LIVE_RUNNING, ACCT_RUNNING, LagClock(100, 60)))


@pytest.mark.parametrize(("now", "expected"), [(130.0, ("accounting_lag", False)), (161.0, ("lost", True))])
def test_unseen_job_lags_until_the_deadline_then_is_lost(now: float, expected) -> None:
    """In neither squeue nor sacct: accounting_lag (non-terminal) until deadline_s after the job
    was last seen, then lost (terminal)."""
    found = observe(["42"], {}, {}, LagClock(now, 60, {"42": 100.0}))[0]
    assert expected == (found.state, found.terminal)


def test_failing_sacct_is_lag_not_an_error() -> None:
    """When sacct cannot answer and squeue has no row, the job is in accounting lag, with why."""
    found = observe(["42"], {}, None, LagClock(100, 60, {"42": 90.0}), sacct_error="sacct exited 1: refused")[0]
    assert ("accounting_lag", "sacct failed: sacct exited 1: refused") == (found.state, found.reason)


def test_a_real_terminal_record_after_lost_still_wins() -> None:
    """Past the deadline the job is lost; once sacct replays its record, that record is the answer."""
    lag = LagClock(1000, 60, {"42": 100.0})
    assert "lost" == observe(["42"], {}, {}, lag)[0].state
    assert "completed" == observe(["42"], {}, ACCT_DONE, lag)[0].state


def test_sacct_running_without_squeue_row_is_lag() -> None:
    """sacct still says RUNNING but the controller no longer lists the job: accounting lag."""
    found = observe(["42"], {}, ACCT_RUNNING, LagClock(100, 60, {"42": 95.0}))[0]
    assert ("accounting_lag", "RUNNING") == (found.state, found.raw_state)


def test_query_without_history() -> None:
    """A raw query has no deadline: not found while sacct answered is lost; sacct failing is lag."""
    assert "lost" == observe(["7"], {}, {}, LagClock(100, None))[0].state
    assert "accounting_lag" == observe(["7"], {}, None, LagClock(100, None), "down")[0].state


def test_array_parent_expands_to_every_task_and_a_task_to_itself() -> None:
    """Querying the array job gives one observation per task (the pending range expanded);
    querying one task gives just that task."""
    live = index_rows(parse_squeue("11_[3-5%2]|PENDING|JobArrayTaskLimit|a\n11_2|RUNNING|None|a\n11_1|RUNNING|None|a\n"))
    all_tasks = observe(["11"], live, {}, LagClock(0, 60))
    assert ["11_1", "11_2", "11_3", "11_4", "11_5"] == [o.job_id for o in all_tasks]
    assert [("11_4", "pending", False, "squeue")] == states(observe(["11_4"], live, {}, LagClock(0, 60)))


@pytest.mark.parametrize(("squeue", "sacct", "expected"), [
    ("42_3|RUNNING|None|a\n", "", ("running", None)),
    ("42_3|PENDING|JobArrayTaskLimit|a\n", "", ("pending", "JobArrayTaskLimit")),
    ("", "42_3|COMPLETED|0:0|JobArrayTaskLimit|a\n", ("completed", None)),
    ("", "42_3|FAILED|1:0|Priority|a\n", ("failed", None)),
    ("", "42_3|FAILED|1:0|NonZeroExitCode|a\n", ("failed", "NonZeroExitCode")),
    ("42_3|TIMEOUT|TimeLimit|a\n", "", ("timeout", "TimeLimit")),
    ("", "42_3|CANCELLED by 1000|0:15|JobArrayTaskLimit|a\n", ("cancelled", "cancelled by 1000")),
])
def test_a_pending_reason_is_shown_only_while_the_job_waits(squeue: str, sacct: str, expected) -> None:
    """Accounting keeps the last pending reason of a finished array task (`JobArrayTaskLimit`):
    a terminal observation carries only a reason that says why it ended (`NonZeroExitCode`), and a
    cancelled one says by whom."""
    found = observe(["42_3"], index_rows(parse_squeue(squeue)), index_rows(parse_sacct(sacct)), LagClock(100, 60))[0]
    assert expected == (found.state, found.reason)
