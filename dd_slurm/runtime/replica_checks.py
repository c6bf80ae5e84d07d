"""Readiness checks of many replicas at once: health probes side by side (threads, each waiting
on its own socket), and the on-node listener identity check of every newly healthy replica in one
step over their leader nodes, instead of one step per replica one after another (the supervisor's
own node needs no step: it reads its /proc itself)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from dd_slurm.plan.placement import Placed
from dd_slurm.runtime.node.listeners import check_listeners, node_addresses
from dd_slurm.runtime.probes import ProvenPort, probe_proven, served_models
from dd_slurm.runtime.replicas import identity_request
from dd_slurm.runtime.step_specs import StepSpec
from dd_slurm.store.atomic import write_json_atomic

if TYPE_CHECKING:
    from dd_slurm.runtime.session import Session

PROBE_THREADS = 32  # probes and /v1/models requests in flight at once
IDENTITY_TIMEOUT_S = 60.0
T = TypeVar("T")
R = TypeVar("R")


def each(pool: Executor, action: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`action` of every item, side by side in `pool` (in this thread when there is only one)."""
    items = list(items)
    if len(items) <= 1:
        return [action(item) for item in items]
    return list(pool.map(action, items))


def identity_requests(units: list[Placed], ports: dict[str, int], records: dict[str, Any],
                      leaders: dict[str, StepSpec]) -> dict[str, dict[str, dict[str, int]]]:
    """The batch request: leader node -> replica name -> what its listener must belong to
    (replicas.identity_request; ValueError names the step whose record is not valid)."""
    nodes: dict[str, dict[str, dict[str, int]]] = {}
    for unit in units:
        leader = leaders[unit.name]
        try:
            request = identity_request(records[unit.name], leader, ports[unit.name])
        except ValueError as err:
            raise ValueError(f"{leader.name}: its step record is not valid: {err}") from None
        nodes.setdefault(unit.leader, {})[unit.name] = request
    return nodes


def identity_problem(unit: Placed, answers: dict[str, dict], problem: Optional[str]) -> Optional[str]:
    """Why the unit's listener is not proven ours by the batch's answers, or None when it is."""
    answer = answers.get(unit.leader)
    check = (answer.get("checks") or {}).get(unit.name) if isinstance(answer, dict) else None
    if not isinstance(check, dict):
        return f"the check did not answer ({problem})"
    if not check.get("ours"):
        return str(check.get("detail"))
    return None


def unproven(s: Session, units: list[Placed], ports: dict[str, int], pool: Executor,
             name: str, leaders: Optional[Mapping[str, StepSpec]] = None) -> Optional[tuple[Placed, str]]:
    """The first of `units` not proven ours, and why; None when all are. On each leader's node
    (node_answers): the listener on the port belongs to the leader step's process tree; only
    then, when every one is proven, do requests carry the key (proven_problem, side by side).
    ValueError: a leader's step record is not valid."""
    p = s.prepared
    current = {u.name: (leaders or {}).get(u.name) or p.specs[u.name][0] for u in units}
    nodes = identity_requests(units, ports, {n: p.runner.started(spec.name) for n, spec in current.items()}, current)
    answers, problem = node_answers(s, nodes, name)
    for unit in units:
        detail = identity_problem(unit, answers, problem)
        if detail is not None:
            return unit, detail
    for unit, detail in zip(units, each(pool, lambda u: proven_problem(s, u, ProvenPort(u.leader, ports[u.name])),
                                        units)):
        if detail is not None:
            return unit, detail
    return None


def node_answers(s: Session, nodes: dict[str, dict[str, dict[str, int]]], name: str,
                 resolve: Callable[[str], list[str]] = node_addresses) -> tuple[dict[str, dict], Optional[str]]:
    """The identity check's answer per node. The supervisor's own node (SLURMD_NODENAME) is
    answered here, from the same node-wide /proc the on-node check reads, without an srun step
    (~0.2 s on the path to the client); the other nodes in one step `name`, as before. Each
    node's listeners count on every address its name resolves to here (`resolve`), where the
    probes and the gateway connect from; the on-node check adds what it resolves to there."""
    here = s.ambient.get("SLURMD_NODENAME")
    answers: dict[str, dict] = {}
    if here in nodes:
        answers[here] = {"node": here, "checks": check_listeners(nodes[here], resolve(here))}
    remote = {node: request for node, request in nodes.items() if node != here}
    if not remote:
        return answers, None
    path = s.dir / "steps" / f"{name}.json"
    addresses = {node: resolve(node) for node in remote}
    write_json_atomic(path, {"nodes": remote, "addresses": addresses}, durable=False)  # read by the check moments later
    found, problem = s.prepared.runner.on_nodes(tuple(remote), ["_identity", str(path)], name, IDENTITY_TIMEOUT_S,
                                                role="probe")
    return {**found, **answers}, problem  # a remote line naming this node does not replace its answer


def proven_problem(s: Session, unit: Placed, target: ProvenPort) -> Optional[str]:
    """Why the replica, its port proven ours, is not ready with the key: its health path does not
    answer 200 to a probe carrying it, or /v1/models does not list its served model (None: fine)."""
    deployment = s.deployment(unit.deployment)
    health = probe_proven(target, deployment.health_path, s.api_key)
    if not health["ok"]:
        return f"{deployment.health_path} with the attempt key: {health['error'] or 'answered ' + str(health['status'])}"
    return served_problem(s, unit, target)


def served_problem(s: Session, unit: Placed, target: ProvenPort) -> Optional[str]:
    """Why /v1/models does not list the replica's served model (None: it does, or none is named)."""
    served = s.deployment(unit.deployment).served_model
    if served is None:
        return None
    models, problem = served_models(target, s.api_key)
    if served in models:
        return None
    return f"/v1/models does not list {served!r} ({problem or 'it lists ' + (', '.join(models) or 'nothing')})"
