"""The attempt state machine, built by `transitions` from `table`. Callbacks are one line each."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Optional, Protocol

from transitions import Machine
from transitions.core import EventData
from transitions.core import MachineError as TransitionsMachineError

from dd_slurm.errors import AttemptFailure, MachineError
from dd_slurm.machine import table
from dd_slurm.machine.journal import Journal, current_state


class Actions(Protocol):
    """The work the runtime supplies, exactly `table.ACTION_NAMES` (a test holds them equal).
    Guards return True or raise AttemptFailure."""

    def inputs_verified(self) -> bool: ...
    def launch_preflight(self) -> None: ...
    def launch_probe(self) -> None: ...
    def launch_staging(self) -> None: ...
    def preflights_passed(self) -> bool: ...
    def launch_deployments(self) -> None: ...
    def release_deployments(self) -> None: ...
    def launch_gateway(self) -> None: ...
    def deployments_ready(self) -> bool: ...
    def route_gateway(self) -> None: ...
    def gateway_serving(self) -> bool: ...
    def publish_endpoints(self) -> None: ...
    def launch_client(self) -> None: ...
    def client_succeeded(self) -> bool: ...
    def results_valid(self) -> bool: ...
    def run_cleanup(self, outcome: str, reason: str) -> None: ...


def machine_transitions() -> list[dict[str, Any]]:
    """The table as `transitions` wants it."""
    return [
        {"trigger": e.trigger, "source": e.source, "dest": e.dest,
         "conditions": [e.guard] if e.guard else [], "before": [e.action] if e.action else []}
        for e in table.EDGES
    ]


class Attempt:
    """One attempt's machine. `step()` fires the next trigger; failures go down the `fail` edge."""

    state: str
    # Added to the model by `transitions` (the trigger method and one method per trigger name).
    trigger: Callable[..., bool]
    fail: Callable[..., bool]

    def __init__(self, actions: Actions, journal: Journal, state: Optional[str] = None) -> None:
        self.actions = actions
        self.journal = journal
        self.outcome, self.reason, self.detail = _recorded_outcome(journal.entries())
        self.cleanup_runs = 0
        self.machine = Machine(
            model=self, states=list(table.STATES), transitions=machine_transitions(),
            initial=state or current_state(journal.entries(), table.INITIAL), auto_transitions=False,
            send_event=True,
        )
        for state_name in table.STATES:  # journal first, so an entry action that raises is still recorded
            self.machine.get_state(state_name).add_callback("enter", "journal_transition")
            for name in table.ON_ENTER.get(state_name, ()):
                self.machine.get_state(state_name).add_callback("enter", name)

    # Guards and actions: each table name calls the runtime action of that name (cleanup once).
    def __getattr__(self, name: str) -> Callable[[Optional[EventData]], Any]:
        if name == "run_cleanup":
            return lambda _e: self.cleanup_once()
        if name in table.ACTION_NAMES:
            return lambda _e: getattr(self.actions, name)()
        raise AttributeError(name)

    # The machine's own bookkeeping.
    def note_success(self, _e: EventData) -> None: self.set_outcome("succeeded", "ok", None)
    def note_failure(self, e: EventData) -> None: self.set_outcome(**_failure_args(e))
    def note_late_failure(self, e: EventData) -> None: self.journal_internal(e)
    def note_replica_event(self, e: EventData) -> None: self.journal_event(e)
    def note_event(self, e: EventData) -> None: self.journal_event(e)

    def set_outcome(self, outcome: str, reason: str, detail: Optional[str]) -> None:
        if self.outcome is None:
            self.outcome, self.reason, self.detail = outcome, reason, detail

    def cleanup_once(self) -> None:
        """Run cleanup work once per process. It never raises: a failure is journaled and the
        attempt still reaches done (the cleanup report says what was left)."""
        if self.cleanup_runs:
            return
        self.cleanup_runs += 1
        try:
            self.actions.run_cleanup(self.outcome or "failed", self.reason or "internal_error")
        except Exception as exc:
            self.journal.append("internal", self.state, self.state, "run_cleanup",
                                cleanup_error=f"{type(exc).__name__}: {exc}")

    def journal_transition(self, e: EventData) -> None:
        source, dest = _edge(e)
        ending = dest in (table.CLEANUP, table.TERMINAL)
        self.journal.append(
            "transition", source, dest, e.event.name,
            outcome=self.outcome if ending else None, reason=self.reason if ending else None,
            detail=self.detail if ending else None,
        )

    def journal_internal(self, e: EventData) -> None:
        args = _failure_args(e)
        self.journal.append("internal", self.state, self.state, e.event.name, ignored_reason=args["reason"])

    def journal_event(self, e: EventData) -> None:
        self.journal.append("event", self.state, self.state, e.event.name, **e.kwargs)

    def replica_event(self, trigger: str, **fields: Any) -> None:
        """A replica or staging event (table.REPLICA_EVENTS, STAGING_EVENTS) journaled in the current
        state; outside the states where it can happen it is not an event of this attempt and is dropped."""
        if table.next_state(self.state, trigger) == self.state and trigger in table.EVENT_TRIGGERS:
            self.fire(trigger, **fields)

    # The driver.
    def step(self) -> str:
        """Fire the next forward trigger; on any failure take the `fail` edge. Returns the new state."""
        if self.state == table.TERMINAL:
            return self.state
        trigger = table.NEXT_TRIGGER[self.state]
        try:
            if not self.trigger(trigger):
                raise AttemptFailure(f"{trigger}_guard_false")
        except AttemptFailure as failure:
            self.fail(outcome=failure.outcome, reason=failure.reason, detail=failure.detail or None)
        except Exception as exc:
            _report_internal(exc, self.state, trigger)
            self.fail(outcome="failed", reason="internal_error", detail=f"{type(exc).__name__}: {exc}")
        return self.state

    def resume(self) -> None:
        """A process that finds the attempt in cleanup runs cleanup again: it is a reconcile."""
        if self.state == table.CLEANUP:
            self.cleanup_once()

    def advance(self, until: Optional[str] = None) -> str:
        self.resume()
        while self.state != table.TERMINAL and self.state != until:
            self.step()
        return self.state

    def fire(self, trigger: str, **kwargs: Any) -> bool:
        """Fire a trigger by name; a trigger the table does not allow here is a MachineError."""
        try:
            return self.trigger(trigger, **kwargs)
        except (TransitionsMachineError, AttributeError) as err:
            raise MachineError(f"trigger {trigger!r} is not allowed in state {self.state!r}") from err


def _edge(e: EventData) -> tuple[str, str]:
    """The (source, dest) of the transition that entered a state; every table edge has a dest."""
    if e.transition is None or e.transition.dest is None:
        raise MachineError(f"event {e.event.name!r} entered a state without an edge")
    return e.transition.source, e.transition.dest


def _failure_args(e: EventData) -> dict[str, Any]:
    return {"outcome": e.kwargs.get("outcome", "failed"), "reason": e.kwargs.get("reason", "internal_error"),
            "detail": e.kwargs.get("detail")}


def _recorded_outcome(entries: list[dict[str, Any]]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    for entry in entries:
        if entry.get("outcome"):
            return entry["outcome"], entry.get("reason"), entry.get("detail")
    return None, None, None


def _report_internal(exc: BaseException, state: str, trigger: str) -> None:
    """An internal error's traceback on stderr (the batch log): the journal keeps one line, and
    a bug found once must be findable from what it left behind."""
    import traceback

    print(f"internal error in {state} ({trigger}):", file=sys.stderr)
    traceback.print_exception(exc, file=sys.stderr)
