"""How the attempt machine's guards wait: each wait is named for what it waits for, and all of them
are one `wait_until` against an absolute monotonic deadline on the session's clock. Every round
runs a check first: a signal that has landed decides before anything else, and a deployment step
or the gateway that ended is a failure at once, not at a deadline."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional, TypeVar, Union

from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime import gateway_step

if TYPE_CHECKING:
    from dd_slurm.clock import Clock
    from dd_slurm.runtime.session import Session

T = TypeVar("T")
EXIT_POLL_S = 0.01  # waiting for one process to exit or to serve: a poll is one waitpid or one small read
SIGNAL_GRACE_S = 2.0


def _nothing() -> None:
    return None


def wait_until(ready: Callable[[], Optional[T]], deadline: Optional[float], clock: Clock,
               poll: Union[float, Callable[[], float]], check: Callable[[], None] = _nothing) -> Optional[T]:
    """What `ready` returns once it is not None; None once `deadline` (monotonic; None: no
    deadline) has passed first. `check` runs before every call of `ready` and raises to end the
    wait; `poll` is the pause between rounds (or what gives it, asked each round)."""
    while True:
        check()
        value = ready()
        if value is not None:
            return value
        if deadline is not None and clock.monotonic() > deadline:
            return None
        clock.sleep(poll() if callable(poll) else poll)


def wait_for_signal(session: Session) -> None:
    """Before calling a child's exit or absence a failure: scancel (and the time limit) signal the
    steps and the batch step at once, so our own signal gets up to SIGNAL_GRACE_S to land (under
    load, slurmstepd delivers them apart), and then wins."""
    gate = session.gate
    wait_until(lambda: gate.received or None, session.clock.monotonic() + SIGNAL_GRACE_S, session.clock, EXIT_POLL_S)
    gate.check()


def unless_signalled(session: Session, failure: AttemptFailure) -> AttemptFailure:
    """`failure`, unless a signal landing within the grace decides the attempt's end instead."""
    wait_for_signal(session)
    return failure


def wait_exit(session: Session, name: str, deadline: Optional[float], alive: Callable[[], None]) -> Optional[int]:
    """The exit code of step `name`, or None when it still runs at `deadline`; `alive` runs after
    every poll that found it running."""
    def exited() -> Optional[int]:
        code = session.table.poll(name)
        if code is None:
            alive()
        return code

    return wait_until(exited, deadline, session.clock, EXIT_POLL_S, check=session.gate.check)


def wait_in_thread(session: Session, work: Callable[[], T], deadline: Optional[float], poll: float) -> Optional[T]:
    """`work()` done in a daemon thread: what it returned, or None when it raised or still runs at
    `deadline` (a lookup that hangs ends there); a signal still decides first."""
    found: list[T] = []
    worker = threading.Thread(target=lambda: found.append(work()), daemon=True)
    worker.start()
    wait_until(lambda: None if worker.is_alive() else True, deadline, session.clock, poll, check=session.gate.check)
    return found[0] if found else None


def check_gateway_alive(session: Session, wait_s: float = 0.0) -> None:
    """The gateway's failure if it has exited (waiting up to `wait_s` for it to): a stalled replica
    ends it, or it ended by itself."""
    if gateway_step.GATEWAY_STEP not in session.table.procs:
        return
    code = session.table.wait(gateway_step.GATEWAY_STEP, session.clock.monotonic() + wait_s)
    if code is not None:
        raise unless_signalled(session, gateway_step.exit_failure(session.dir, code))
