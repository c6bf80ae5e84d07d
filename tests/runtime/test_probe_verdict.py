"""The node probe's verdict when the probe step is still running at its deadline: the nodes that
answered are checked, and a node that stayed silent is named (`hosts`), not a bare timeout."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime.actions import PROBE_STEP, PROBE_TIMEOUT_S, RuntimeActions

pytestmark = pytest.mark.timeout(30)

FINE = {"visible_gpus": 4, "missing_executables": [], "busy_ports": []}


class HangingProbe:
    """The probe step never exits by itself; node_answers reports what the runner reports for a
    step it had to kill at the deadline: the lines that arrived, and the problem."""

    def __init__(self, answers: dict) -> None:
        self.answers, self.asked = answers, []

    def poll(self, _name: str) -> None:
        return None

    def node_answers(self, name: str, deadline: float) -> tuple[dict, str]:
        self.asked.append((name, deadline))
        return self.answers, f"{name}: timed out: "


def _actions(answers: dict) -> tuple[RuntimeActions, HangingProbe, FakeClock]:
    clock, probe = FakeClock(), HangingProbe(answers)
    prepared = SimpleNamespace(runner=probe, plan=SimpleNamespace(job=SimpleNamespace(gpus_per_node=4)),
                               alloc=SimpleNamespace(nodes=("n1", "n2")))
    session = SimpleNamespace(gate=SimpleNamespace(check=lambda: None), clock=clock, prepared=prepared,
                              table=SimpleNamespace(poll=probe.poll, procs={PROBE_STEP: "the probe step"}),
                              ambient={"SLURMD_NODENAME": "batch-node"})  # both nodes are probed by the step
    actions = RuntimeActions(session)  # type: ignore[arg-type]
    actions.probe_deadline = clock.monotonic() + PROBE_TIMEOUT_S
    return actions, probe, clock


@pytest.mark.parametrize("answers, expected", [
    ({"n1": {"node": "n1", **FINE}}, ("hosts", "node n2 did not answer the probe")),
    ({}, ("probe_failed", "probe: timed out: ")),
], ids=["one node silent", "no node answered"])
def test_a_probe_running_at_its_deadline_names_what_it_could(answers, expected) -> None:
    """At the deadline (and not before) the answers are read: the silent node is named as `hosts`;
    with no answer at all the step's own problem is the verdict."""
    actions, probe, clock = _actions(answers)
    with pytest.raises(AttemptFailure) as failure:
        actions.preflights_passed()
    assert (expected, [(PROBE_STEP, clock.monotonic())]) == ((failure.value.reason, failure.value.detail), probe.asked)
    assert clock.monotonic() >= actions.probe_deadline


def test_this_nodes_probe_that_hangs_names_this_node_at_the_deadline(tmp_path) -> None:
    """The supervisor's own node is probed in-process; a lookup there that never returns (a stale
    mount under a program's path) ends at the probe's deadline as a silent probe step would: the
    node is named (`hosts`), and the supervisor was not stuck in it."""
    import threading

    stuck = threading.Event()
    clock = FakeClock()
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "probe-request.json").write_text('{"nodes": {"n1": {"ports": [], "executables": []}}}')
    prepared = SimpleNamespace(plan=SimpleNamespace(job=SimpleNamespace(gpus_per_node=0)),
                               alloc=SimpleNamespace(nodes=("n1",)))
    session = SimpleNamespace(gate=SimpleNamespace(check=lambda: None), clock=clock, prepared=prepared, dir=tmp_path,
                              table=SimpleNamespace(procs={}), ambient={"SLURMD_NODENAME": "n1"})
    actions = RuntimeActions(session, local_probe=lambda *_args: stuck.wait(30) and {})  # type: ignore[arg-type]
    actions.probe_deadline = clock.monotonic() + 1.0
    try:
        with pytest.raises(AttemptFailure) as failure:
            actions.preflights_passed()
    finally:
        stuck.set()
    assert ("hosts", "node n1 did not answer the probe") == (failure.value.reason, failure.value.detail)
    assert clock.monotonic() >= actions.probe_deadline
