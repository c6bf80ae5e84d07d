"""Signal coordination. Handlers only record; the driver decides at its next check, so a signal
can never interrupt a spawn between the fork and the registration of the child."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Optional

from dd_slurm.errors import AttemptFailure

OUTCOMES: dict[int, tuple[str, str]] = {  # by signal number (Signals are ints)
    signal.SIGTERM: ("cancelled", "sigterm"),  # scancel
    signal.SIGINT: ("cancelled", "sigint"),
    signal.SIGUSR1: ("timed_out", "pre_timeout_signal"),  # --signal=B:USR1@N before the time limit
    signal.SIGHUP: ("failed", "sighup"),
}


class SignalGate:
    """`early`: the list the entry point's first instructions have been recording into; the gate
    keeps appending to that same list, so a signal that came before the gate existed counts.
    `time_limit` (optional) answers, when SIGTERM is decided, whether Slurm sent it because the
    job reached its time limit: then the outcome is timed_out/time_limit, not cancelled."""

    def __init__(self, early: Optional[list[int]] = None, time_limit: Optional[Callable[[], bool]] = None) -> None:
        self.received: list[int] = early if early is not None else []
        self.acted_on = 0
        self._previous: dict[int, object] = {}
        self._time_limit = time_limit

    def install(self) -> SignalGate:
        for signo in OUTCOMES:
            self._previous[signo] = signal.signal(signo, self._record)
        return self

    def uninstall(self) -> None:
        for signo, handler in self._previous.items():
            signal.signal(signo, handler)  # type: ignore[arg-type]

    def _record(self, signo: int, _frame: object) -> None:
        self.received.append(signo)

    def first(self) -> Optional[int]:
        return self.received[0] if self.received else None

    def check(self) -> None:
        """Raise the failure the first signal means; a no-op when none arrived."""
        signo = self.first()
        if signo is not None:
            self.acted_on = 1
            outcome, reason = OUTCOMES[signo]
            if signo == signal.SIGTERM and self._time_limit and self._time_limit():
                outcome, reason = "timed_out", "time_limit"
            raise AttemptFailure(reason, f"received {signal.Signals(signo).name}", outcome=outcome)

    def unheeded(self) -> list[str]:
        """Reasons of signals that decided nothing (they came during or after cleanup)."""
        return [OUTCOMES[s][1] for s in self.received[self.acted_on:]]
