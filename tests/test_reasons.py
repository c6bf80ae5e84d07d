"""Failure reasons are declared once (dd_slurm/reasons.py): errors accept only those, the code
raises only those, and the README's "Failure kinds" table lists exactly those."""

from __future__ import annotations

import ast
import re
import signal

import pytest

from dd_slurm import reasons
from dd_slurm.errors import AttemptFailure, VerificationError
from dd_slurm.machine import table
from dd_slurm.runtime.signals import OUTCOMES as SIGNAL_OUTCOMES
from tests.conftest import ROOT

RAISERS = {"AttemptFailure": 0, "VerificationError": 0, "_wait_exit": 2}  # callee -> position of its reason


def readme_failure_table() -> dict[str, frozenset[str]]:
    """reason -> outcomes, from the table under the README's "## Failure kinds"."""
    section = (ROOT / "README.md").read_text().split("\n## Failure kinds\n", 1)[1].split("\n#", 1)[0]
    found: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[1] in ("outcome", "---"):
            continue
        outcomes = frozenset(re.findall(r"`(\w+)`", cells[1]))
        for name in re.findall(r"`(\w+)`", cells[2]):
            found[name] = found.get(name, frozenset()) | outcomes
    return found


def reasons_in_source() -> set[str]:
    """Every literal reason passed to AttemptFailure, VerificationError or a step's timeout wait."""
    found: set[str] = set()
    for path in (ROOT / "dd_slurm").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            callee = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            position = RAISERS.get(callee or "")
            if position is not None and len(node.args) > position and isinstance(node.args[position], ast.Constant):
                found.add(node.args[position].value)
    return found


def test_the_readme_failure_table_is_the_declared_set() -> None:
    """Names and outcomes: the README's table and dd_slurm/reasons.py say the same."""
    assert dict(sorted(reasons.REASONS.items())) == dict(sorted(readme_failure_table().items()))


def test_an_undeclared_reason_raises_at_construction() -> None:
    """AttemptFailure (and its subclass) refuse a reason that reasons.py does not declare."""
    with pytest.raises(ValueError, match="'no_such_reason' is not a declared failure reason"):
        AttemptFailure("no_such_reason", "detail")
    with pytest.raises(ValueError, match="not a declared failure reason"):
        VerificationError("no_such_check", "detail")


def test_an_outcome_the_reason_does_not_carry_raises() -> None:
    """A declared reason with an outcome it is not declared with is refused too."""
    with pytest.raises(ValueError, match="ends an attempt timed_out, not 'cancelled'"):
        AttemptFailure("readiness_timeout", outcome="cancelled")
    with pytest.raises(ValueError, match="ends an attempt cancelled or failed or timed_out, not None"):
        AttemptFailure("supervisor_lost")


def test_the_outcome_defaults_to_the_reasons_declared_one() -> None:
    """Callers name the reason; the outcome comes from the declaration."""
    assert [("timed_out", "readiness_timeout"), ("failed", "hosts"), ("cancelled", "sigterm")] == [
        (failure.outcome, failure.reason) for failure in
        (AttemptFailure("readiness_timeout"), VerificationError("hosts", "x"), AttemptFailure("sigterm"))]


def test_every_reason_the_code_raises_is_declared() -> None:
    """The literal reasons in dd_slurm/, the signals' table and the machine's guard failures are all
    declared (the scan finds the verify checks, so it does look)."""
    raised = reasons_in_source()
    guards = {f"{edge.trigger}_guard_false" for edge in table.EDGES if edge.guard}
    signalled = {reason for _outcome, reason in SIGNAL_OUTCOMES.values()} | {"time_limit"}
    assert {"hosts", "client_timeout", "srun_missing"} <= raised
    assert {f"{trigger}_guard_false" for trigger in reasons.GUARDED_TRIGGERS} == guards
    assert set() == (raised | guards | signalled) - set(reasons.REASONS)
    assert [] == [(s, o, r) for s, (o, r) in SIGNAL_OUTCOMES.items() if reasons.outcome_of(r, o) != o]
    assert {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP} == set(SIGNAL_OUTCOMES)


def test_the_machine_outcomes_are_the_declared_ones() -> None:
    """The table's outcomes are reasons.OUTCOMES, and every declared outcome is one of them."""
    assert set(table.OUTCOMES) == set().union(*reasons.REASONS.values())
