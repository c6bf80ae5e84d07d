"""Random trigger sequences against an oracle: the machine never leaves the declared graph."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.clock import FakeClock
from dd_slurm.errors import AttemptFailure, MachineError
from dd_slurm.machine import table
from dd_slurm.machine.attempt import Attempt
from dd_slurm.machine.journal import Journal
from tests.machine.fakes import ScriptedActions
from tests.machine.test_table import EXPECTED

ALLOWED_MOVES = {(s, d) for (s, _t), d in EXPECTED.items()}
behaviours = st.fixed_dictionaries({name: st.sampled_from(["ok", "ok", "false", "raise"]) for name in table.ACTION_NAMES})
operations = st.lists(st.one_of(st.just("step"), st.sampled_from(table.TRIGGERS)), max_size=30)


def _apply(attempt: Attempt, op: str) -> None:
    if op == "step":
        attempt.step()
        return
    try:
        attempt.fire(op, reason="random")
    except (MachineError, AttemptFailure):
        pass


@settings(max_examples=300)
@given(script=behaviours, ops=operations)
def test_random_sequences_stay_in_the_graph_and_end_in_one_cleanup(script, ops) -> None:
    """Whatever the triggers and action results, every move is declared, failures reach
    cleanup then done, the journal is one connected path, and cleanup work runs at most once."""
    with tempfile.TemporaryDirectory() as tmp:
        actions = ScriptedActions(script)
        attempt = Attempt(actions, Journal(Path(tmp), FakeClock()))
        for op in ops:
            _apply(attempt, op)
            assert attempt.state in table.STATES
        assert "done" == attempt.advance()
        moves = [(e["from"], e["to"]) for e in attempt.journal.entries() if e["kind"] == "transition"]
        assert set(moves) <= ALLOWED_MOVES
        assert all(a[1] == b[0] for a, b in zip(moves, moves[1:])), moves
        assert 1 == sum(1 for _s, d in moves if d == "cleanup")
        assert actions.calls.count("run_cleanup") <= 1
        assert attempt.outcome in table.OUTCOMES


GUARDS = {e.guard for e in table.FORWARD if e.guard}
PATH_ACTIONS = [n for n in table.ACTION_NAMES if n != "run_cleanup"]
step_behaviours = st.fixed_dictionaries(
    {n: st.sampled_from(["ok", "false", "raise"] if n in GUARDS else ["ok", "raise"]) for n in PATH_ACTIONS}
)


@given(script=step_behaviours)
def test_step_driver_matches_the_oracle(script) -> None:
    """Driving with `step` only: the outcome is succeeded exactly when every action on the path
    succeeded; otherwise it is failed with the reason (or, for a raise, the detail) of the first
    action that did not."""
    with tempfile.TemporaryDirectory() as tmp:
        attempt = Attempt(ScriptedActions(script), Journal(Path(tmp), FakeClock()))
        attempt.advance()
        first_bad = next((n for n in PATH_ACTIONS if script[n] != "ok"), None)
        if first_bad is None:
            expected = ("succeeded", "ok", None)
        elif script[first_bad] == "raise":
            expected = ("failed", "internal_error", first_bad)
        else:
            trigger = next(e.trigger for e in table.FORWARD if e.guard == first_bad)
            expected = ("failed", f"{trigger}_guard_false", None)
        assert expected == (attempt.outcome, attempt.reason, attempt.detail)
