"""scancel and the time limit signal a job's steps and its batch step at once, and slurmstepd
delivers them apart (under load, by more than a second): a server, the gateway or the client
killed by that signal can look like a failure before the supervisor's own SIGTERM has landed.
Such a failure is the signal's: the attempt ends cancelled (or timed_out), not failed."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Optional

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime import gateway_step
from dd_slurm.runtime.actions import RuntimeActions
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.waits import SIGNAL_GRACE_S, check_gateway_alive, unless_signalled
from dd_slurm.store.readiness import Readiness


class SignalAfter(FakeClock):
    """A clock on which the supervisor's SIGTERM arrives once `after_s` have been slept (never: None)."""

    def __init__(self, gate: SignalGate, after_s: Optional[float]) -> None:
        super().__init__()
        self.gate, self.after_s, self.slept = gate, after_s, 0.0

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.slept += seconds
        if self.after_s is not None and self.slept >= self.after_s and not self.gate.received:
            self.gate._record(signal.SIGTERM, None)


class ExitedGateway:
    """A step table whose only step is a gateway that exited 1."""

    procs = {gateway_step.GATEWAY_STEP: object()}

    def wait(self, name: str, deadline: float) -> int:
        return 1


def actions_for(tmp_path, after_s: Optional[float], time_limit: bool = False) -> RuntimeActions:
    gate = SignalGate(time_limit=lambda: time_limit)
    session = SimpleNamespace(gate=gate, clock=SignalAfter(gate, after_s), table=ExitedGateway(), dir=tmp_path)
    actions = RuntimeActions(session)  # type: ignore[arg-type]
    actions._readiness = Readiness.new(tmp_path, "a-1", {"small-0": {"deployment": "small", "replica": 0, "nodes": ["n1"]}})
    return actions


def identity_failure(actions: RuntimeActions) -> None:
    actions._identity_failed(SimpleNamespace(name="small-0", leader="n1"), 25390,  # type: ignore[arg-type]
                             "nothing listens on port 25390")


def gateway_exit(actions: RuntimeActions) -> None:
    check_gateway_alive(actions.session)


def client_exit(actions: RuntimeActions) -> None:
    raise unless_signalled(actions.session, AttemptFailure("client_failed", "client exited -15"))


SITES = {"identity": (identity_failure, "server_identity"), "gateway": (gateway_exit, "gateway_failed"),
         "client": (client_exit, "client_failed")}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("after_s", [0.0, 0.3, 1.5], ids=["at-once", "0.3s-later", "1.5s-later"])
@pytest.mark.parametrize("site", list(SITES))
def test_a_failure_just_before_our_sigterm_ends_cancelled(tmp_path, site, after_s) -> None:
    """The listener gone, the gateway or the client exited, and SIGTERM lands within the grace:
    the attempt ends cancelled/sigterm, not failed."""
    with pytest.raises(AttemptFailure) as failure:
        SITES[site][0](actions_for(tmp_path, after_s))
    assert ("cancelled", "sigterm") == (failure.value.outcome, failure.value.reason)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("site", list(SITES))
def test_a_failure_at_the_time_limit_ends_timed_out(tmp_path, site) -> None:
    """Slurm's SIGTERM at the time limit, landing a second after the child's exit: timed_out/time_limit."""
    with pytest.raises(AttemptFailure) as failure:
        SITES[site][0](actions_for(tmp_path, 1.0, time_limit=True))
    assert ("timed_out", "time_limit") == (failure.value.outcome, failure.value.reason)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("site", list(SITES))
def test_a_failure_with_no_signal_is_the_failure_after_the_grace(tmp_path, site) -> None:
    """No signal at all: the failure itself, once SIGNAL_GRACE_S has passed."""
    actions = actions_for(tmp_path, None)
    with pytest.raises(AttemptFailure) as failure:
        SITES[site][0](actions)
    assert (SITES[site][1], True) == (failure.value.reason, actions.session.clock.slept >= SIGNAL_GRACE_S)


class ClientDoneGatewayStalled:
    """The client exited 0 in the same poll round in which the gateway exited 75 (a stalled replica)."""

    procs = {"client": object(), gateway_step.GATEWAY_STEP: object()}

    def poll(self, name: str) -> int:
        return 0 if name == "client" else gateway_step.STALLED_EXIT

    def wait(self, name: str, deadline: float) -> int:
        return self.poll(name)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", ["exited", "state-file"])
def test_a_stall_in_the_instant_the_client_succeeds_is_the_outcome(tmp_path, how: str) -> None:
    """The client exits 0 just after the gateway found a stalled replica: whether its exit (75)
    or only its state file (`stalled`) has been seen, the attempt fails server_stalled, naming
    the replica; it does not succeed."""
    import json

    gate = SignalGate(time_limit=lambda: False)
    table = ClientDoneGatewayStalled()
    if how == "state-file":
        table.procs = {"client": object()}  # the gateway's exit not seen yet: only what it wrote
    (tmp_path / "gateway-state.json").write_text(json.dumps({"state": "stalled", "stalled": [
        {"name": "big-0", "base_url": "http://n1:1/v1", "silent_s": 301.0, "inflight": 2}]}))
    session = SimpleNamespace(gate=gate, clock=SignalAfter(gate, None), table=table, dir=tmp_path)
    actions = RuntimeActions(session)  # type: ignore[arg-type]
    actions.client_deadline = None
    with pytest.raises(AttemptFailure) as failure:
        actions.client_succeeded()
    assert ("failed", "server_stalled", "replica big-0 (http://n1:1/v1) sent no response byte for 301s with 2 "
            "request(s) in flight") == (failure.value.outcome, failure.value.reason, failure.value.detail)
