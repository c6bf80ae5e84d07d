"""THE table of the attempt state machine, as plain data. Everything else is generated from it.

Reading guide: entering a state starts that state's work (`ON_ENTER`, which must return
quickly); the trigger that leaves a state is guarded by a check that waits for that work to
complete and raises `AttemptFailure` when it did not. A guard or action that raises sends the
driver down the `fail` edge to `cleanup`, from whatever state the machine is in.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from dd_slurm import reasons

STATES: tuple[str, ...] = (
    "staged",
    "verified",
    "preflight",
    "deploying",
    "ready",
    "client",
    "finalize",
    "cleanup",
    "done",
)
INITIAL = "staged"
TERMINAL = "done"
CLEANUP = "cleanup"
FAILURE_TRIGGER = "fail"
OUTCOMES = reasons.OUTCOMES


class Edge(NamedTuple):
    trigger: str
    source: str
    dest: Optional[str]  # None: an internal transition (no exit, no enter)
    guard: Optional[str] = None
    action: Optional[str] = None
    doc: str = ""


FORWARD: tuple[Edge, ...] = (
    Edge("verify", "staged", "verified", guard="inputs_verified",
         doc="bundle and plan checksums, GPU shape, hosts, paths, placement"),
    Edge("start_preflight", "verified", "preflight",
         doc="the node probe and the zero-GPU client preflight start side by side; the deployment steps launch held"),
    Edge("deploy", "preflight", "deploying", guard="preflights_passed",
         doc="every node's probe passed (GPUs, programs, free fixed ports), then the preflight exited 0; servers start"),
    Edge("mark_ready", "deploying", "ready", guard="deployments_ready",
         doc="every replica healthy and proven ours before its deadline"),
    Edge("start_client", "ready", "client", guard="gateway_serving", action="publish_endpoints",
         doc="the gateway, given every replica, serves each alias; endpoints published with its logical URLs"),
    Edge("finalize", "client", "finalize", guard="client_succeeded", doc="client exited 0 in time"),
    Edge("clean_up", "finalize", "cleanup", guard="results_valid", action="note_success",
         doc="result validated, manifest written"),
    Edge("finish", "cleanup", "done", doc="cleanup reported; the outcome is recorded"),
)

FAILURES: tuple[Edge, ...] = tuple(
    Edge(FAILURE_TRIGGER, state, CLEANUP, action="note_failure", doc="any failure, signal or cancellation")
    for state in STATES[: STATES.index(CLEANUP)]
) + (
    Edge(FAILURE_TRIGGER, CLEANUP, None, action="note_late_failure", doc="ignored: cleanup is already running"),
    Edge(FAILURE_TRIGGER, TERMINAL, None, action="note_late_failure", doc="ignored: the attempt has ended"),
)

# What happens to one replica while the servers run: recorded in the journal (kind `event`), never
# an outcome. The attempt fails only when a deployment has fewer serving replicas than its
# `min_replicas` (replicas_below_min), which the runtime raises as any other failure.
REPLICA_STATES = ("deploying", "ready", "client")
REPLICA_EVENTS: tuple[Edge, ...] = tuple(
    Edge(trigger, state, None, action="note_replica_event", doc=doc)
    for trigger, doc in (
        ("lose_replica", "a replica's server exited, its step failed, it stalled or missed its ready deadline: "
                         "out of its alias's pool (`lost`), its steps stopped"),
        ("eject_replica", "the gateway took a replica out of rotation after `eject_after` consecutive "
                          "connect failures or 5xx answers (`ejected`)"),
        ("readmit_replica", "an ejected replica answered its health probe and proved ours again: back in rotation"),
        ("restart_replica", "a lost replica started again in place (`restarting`, then `serving` once ready)"),
    )
    for state in REPLICA_STATES
)

# Node-local weights copied while the preflight runs (before any server starts): one journal event
# per node, with what it took. A staging failure is a failure like any other (weights_*).
STAGING_EVENTS: tuple[Edge, ...] = (
    Edge("weights_staged", "preflight", None, action="note_event",
         doc="a node's copy of a deployment's weights is in place (copied, or an earlier copy reused)"),
)

EDGES: tuple[Edge, ...] = FORWARD + FAILURES + REPLICA_EVENTS + STAGING_EVENTS

# Each state's entry work, in order. The deployment steps are launched held beside the preflight
# and released once it passed; the gateway starts while the servers load and is given its routes
# (every replica's URL) only once they are all ready.
ON_ENTER: dict[str, tuple[str, ...]] = {
    "preflight": ("launch_preflight", "launch_probe", "launch_staging", "launch_deployments"),
    "deploying": ("release_deployments", "launch_gateway"),
    "ready": ("route_gateway",),
    "client": ("launch_client",),
    "cleanup": ("run_cleanup",),
}

NEXT_TRIGGER: dict[str, str] = {edge.source: edge.trigger for edge in FORWARD}
TRIGGERS: tuple[str, ...] = tuple(dict.fromkeys(edge.trigger for edge in EDGES))

# The machine's own bookkeeping actions; every other guard and action name is work the runtime supplies.
MACHINE_ACTIONS: frozenset[str] = frozenset({"note_success", "note_failure", "note_late_failure", "note_replica_event",
                                            "note_event"})
EVENT_TRIGGERS: tuple[str, ...] = tuple(dict.fromkeys(e.trigger for e in REPLICA_EVENTS + STAGING_EVENTS))


def _runtime_names() -> tuple[str, ...]:
    """Runtime work in the order an attempt meets it: each state's entry work, then its exit edge."""
    names: list[str] = []
    for state in STATES:
        names.extend(ON_ENTER.get(state, ()))
        edge = next((e for e in FORWARD if e.source == state), None)
        if edge:
            names.extend((edge.guard or "", edge.action or ""))
    return tuple(dict.fromkeys(n for n in names if n and n not in MACHINE_ACTIONS))


ACTION_NAMES: tuple[str, ...] = _runtime_names()
GUARD_NAMES: frozenset[str] = frozenset(e.guard for e in EDGES if e.guard)
# From the first state whose entry starts processes until cleanup, processes may be running that
# only a live supervisor can account for.
LIVE_STATES: tuple[str, ...] = STATES[min(STATES.index(s) for s in ON_ENTER if s != CLEANUP): STATES.index(CLEANUP)]
# States `advance --until` can stop at: every state after the initial one.
UNTIL_STATES: tuple[str, ...] = STATES[1:]


def next_state(state: str, trigger: str) -> str | None:
    """The declared destination of `trigger` from `state` (state itself for internal), or None."""
    for edge in EDGES:
        if edge.source == state and edge.trigger == trigger:
            return edge.dest or state
    return None
