"""scancel signals a job's steps and its batch step at once: a server killed by it can fail the
identity check before the supervisor's own SIGTERM has landed. That failure is the signal's."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime.actions import RuntimeActions
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.store.readiness import Readiness


class SignalWhileWaiting(FakeClock):
    """A clock whose first sleep is when the supervisor's SIGTERM arrives."""

    def __init__(self, gate: SignalGate) -> None:
        super().__init__()
        self.gate = gate

    def sleep(self, seconds: float) -> None:
        self.gate._record(signal.SIGTERM, None)
        super().sleep(seconds)


@pytest.mark.timeout(30)
def test_an_identity_failure_just_before_our_sigterm_ends_cancelled(tmp_path) -> None:
    """The listener is gone ("nothing listens") and SIGTERM lands during the settle wait: the
    attempt ends cancelled/sigterm, not failed/server_identity."""
    gate = SignalGate()
    actions = RuntimeActions(SimpleNamespace(gate=gate, clock=SignalWhileWaiting(gate)))  # type: ignore[arg-type]
    actions._readiness = Readiness.new(tmp_path, "a-1", {"small-0": {"nodes": ["n1"]}})
    with pytest.raises(AttemptFailure) as failure:
        actions._identity_failed(SimpleNamespace(name="small-0", leader="n1"), 25390,  # type: ignore[arg-type]
                                 "nothing listens on port 25390")
    assert ("cancelled", "sigterm") == (failure.value.outcome, failure.value.reason)
