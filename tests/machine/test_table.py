"""The attempt state table: every (state, trigger) pair, written out by hand as the oracle."""

from __future__ import annotations

import itertools

import pytest

from dd_slurm.errors import MachineError
from dd_slurm.machine import table
from dd_slurm.machine.attempt import Attempt
from dd_slurm.machine.journal import Journal
from tests.machine.fakes import ScriptedActions

EXPECTED = {
    ("staged", "verify"): "verified",
    ("verified", "start_preflight"): "preflight",
    ("preflight", "deploy"): "deploying",
    ("deploying", "mark_ready"): "ready",
    ("ready", "start_client"): "client",
    ("client", "finalize"): "finalize",
    ("finalize", "clean_up"): "cleanup",
    ("cleanup", "finish"): "done",
    **{(state, "fail"): "cleanup" for state in
       ("staged", "verified", "preflight", "deploying", "ready", "client", "finalize")},
    ("cleanup", "fail"): "cleanup",
    ("done", "fail"): "done",
    # a replica's events while servers run: journaled, the state stays
    **{(state, event): state for state in ("deploying", "ready", "client")
       for event in ("lose_replica", "eject_replica", "readmit_replica", "restart_replica")},
    # a node's weights copied (or reused) while the preflight runs: journaled, the state stays
    ("preflight", "weights_staged"): "preflight",
}
PAIRS = list(itertools.product(table.STATES, table.TRIGGERS))


def test_states_are_the_contract_states_in_order() -> None:
    """The machine's states are exactly the README's, in order, with `done` terminal."""
    expected = ("staged", "verified", "preflight", "deploying", "ready", "client", "finalize", "cleanup", "done")
    assert expected == table.STATES
    assert "done" == table.TERMINAL


@pytest.mark.parametrize(("state", "trigger"), PAIRS, ids=[f"{s}-{t}" for s, t in PAIRS])
def test_every_state_trigger_pair(tmp_path, clock, state: str, trigger: str) -> None:
    """Each pair goes to the hand-written destination, or is rejected with MachineError."""
    attempt = Attempt(ScriptedActions(), Journal(tmp_path, clock), state=state)
    expected = EXPECTED.get((state, trigger))
    if expected is None:
        with pytest.raises(MachineError):
            attempt.fire(trigger)
        assert state == attempt.state
    else:
        attempt.fire(trigger, reason="test")
        assert expected == attempt.state


def test_a_replica_event_is_journaled_and_changes_nothing_else(tmp_path, clock) -> None:
    """A lost replica while the client runs is a journal event (kind `event`, with its fields),
    not a transition: the state, the outcome and the next trigger are unchanged. Outside the
    states where servers run the same event is dropped, not an error."""
    attempt = Attempt(ScriptedActions(), Journal(tmp_path, clock), state="client")
    attempt.replica_event("lose_replica", replica="m-1", reason="server_crashed")
    entry = attempt.journal.entries()[-1]
    assert (("client", None), ("event", "client", "client", "lose_replica", "m-1", "server_crashed")) == (
        (attempt.state, attempt.outcome),
        (entry["kind"], entry["from"], entry["to"], entry["trigger"], entry["replica"], entry["reason"]))
    done = Attempt(ScriptedActions(), Journal(tmp_path / "x", clock), state="finalize")
    done.replica_event("lose_replica", replica="m-1")
    assert [] == done.journal.entries()


def test_table_helper_agrees_with_the_oracle() -> None:
    """`table.next_state` (used by docs and tools) agrees with the hand-written oracle."""
    assert EXPECTED == {(s, t): table.next_state(s, t) for s, t in PAIRS if table.next_state(s, t)}


def test_every_state_before_cleanup_has_a_failure_edge() -> None:
    """The contract: every state before cleanup has a failure edge to cleanup."""
    before = table.STATES[: table.STATES.index("cleanup")]
    assert {(s, "fail") for s in before} <= {(e.source, e.trigger) for e in table.FAILURES if e.dest == "cleanup"}


def test_every_named_callback_exists_on_the_model(tmp_path, clock) -> None:
    """Every guard, action and on-enter name in the table resolves to a callable on an Attempt model."""
    names = ({e.guard for e in table.EDGES} | {e.action for e in table.EDGES}
             | {n for names in table.ON_ENTER.values() for n in names})
    model = Attempt(ScriptedActions(), Journal(tmp_path, clock))
    missing = sorted(n for n in names - {None} if not callable(getattr(model, n, None)))
    assert [] == missing


def test_happy_path_runs_every_action_once_in_order(tmp_path, clock) -> None:
    """With every action succeeding, `advance` reaches done/succeeded calling each action once."""
    actions = ScriptedActions()
    attempt = Attempt(actions, Journal(tmp_path, clock))
    assert "done" == attempt.advance()
    assert list(table.ACTION_NAMES) == actions.calls
    assert ("succeeded", "ok") == (attempt.outcome, attempt.reason)


def test_a_guard_that_raises_fails_from_the_source_state(tmp_path, clock) -> None:
    """A failing verification leaves the journal showing staged -> cleanup with its reason."""
    attempt = Attempt(ScriptedActions({"inputs_verified": "raise"}), Journal(tmp_path, clock))
    attempt.advance()
    moves = [(e["from"], e["to"], e.get("reason"), e.get("detail")) for e in attempt.journal.entries()]
    assert [("staged", "cleanup", "internal_error", "inputs_verified"),
            ("cleanup", "done", "internal_error", "inputs_verified")] == moves


def test_an_unexpected_exception_is_an_internal_error_with_its_traceback_on_stderr(tmp_path, clock, capsys) -> None:
    """A bug in an action fails the attempt with internal_error and a one-line detail in the
    journal; its traceback goes to stderr (the batch log), so the bug can be found afterwards."""
    attempt = Attempt(ScriptedActions({"deployments_ready": "bug"}), Journal(tmp_path, clock))
    attempt.advance()
    detail = "AttributeError: module 'http' has no attribute 'client' (in deployments_ready)"
    err = capsys.readouterr().err
    assert (("failed", "internal_error"), True, True) == (
        (attempt.outcome, attempt.reason), err.startswith("internal error in deploying (mark_ready):\nTraceback"),
        err.rstrip().endswith(detail))


def test_a_guard_that_declines_is_a_failure_too(tmp_path, clock) -> None:
    """A guard returning False during `step` is not a hang: the attempt fails with a reason."""
    attempt = Attempt(ScriptedActions({"preflights_passed": "false"}), Journal(tmp_path, clock))
    attempt.advance()
    assert ("done", "failed", "deploy_guard_false") == (attempt.state, attempt.outcome, attempt.reason)


def test_the_first_failure_wins(tmp_path, clock) -> None:
    """A second failure (a signal in cleanup) does not replace the recorded outcome."""
    attempt = Attempt(ScriptedActions(), Journal(tmp_path, clock), state="client")
    attempt.fire("fail", outcome="cancelled", reason="scancel")
    attempt.fire("fail", outcome="timed_out", reason="sigusr1")
    attempt.advance()
    assert ("cancelled", "scancel") == (attempt.outcome, attempt.reason)
    assert "sigusr1" == attempt.journal.entries()[1]["ignored_reason"]


def test_a_restored_machine_continues_from_the_journal(tmp_path, clock) -> None:
    """A fresh process reads the journal: same state, same outcome, and it reruns cleanup."""
    first = Attempt(ScriptedActions(), Journal(tmp_path, clock))
    first.advance(until="ready")
    first.fire("fail", outcome="cancelled", reason="scancel")
    actions = ScriptedActions()
    second = Attempt(actions, Journal(tmp_path, clock))
    assert ("cleanup", "cancelled") == (second.state, second.outcome)
    assert "done" == second.advance()
    assert ["run_cleanup"] == actions.calls


def test_the_actions_protocol_is_exactly_the_tables_runtime_names() -> None:
    """The typed Actions protocol names exactly the runtime work the table declares, no more, no less."""
    from dd_slurm.machine.attempt import Actions

    declared = {name for name in vars(Actions) if not name.startswith("_")}
    assert set(table.ACTION_NAMES) == declared


def test_runtime_actions_satisfy_the_protocol() -> None:
    """RuntimeActions has a callable for every runtime name in the table, with the protocol's arity."""
    import inspect

    from dd_slurm.machine.attempt import Actions
    from dd_slurm.runtime.actions import RuntimeActions

    def arity(func) -> int:
        return len(inspect.signature(func).parameters)

    expected = {name: arity(getattr(Actions, name)) for name in table.ACTION_NAMES}
    actual = {name: arity(getattr(RuntimeActions, name)) for name in table.ACTION_NAMES if hasattr(RuntimeActions, name)}
    assert expected == actual


def test_live_states_run_from_the_first_launch_to_cleanup() -> None:
    """The states in which only a live supervisor can account for processes come from the table."""
    assert ("preflight", "deploying", "ready", "client", "finalize") == table.LIVE_STATES
