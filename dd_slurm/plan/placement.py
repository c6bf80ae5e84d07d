"""Which nodes, GPU slots and port each deployment replica gets (pure). The client runs on the
batch node. A replica of a multi-node deployment is its whole leader + followers group."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import attrs

from dd_slurm.errors import VerificationError

if TYPE_CHECKING:
    from dd_slurm.plan.records import Deployment, Plan


@attrs.frozen
class Placed:
    deployment: str
    nodes: tuple[str, ...]
    gpu_slots: tuple[int, ...]  # the same slots on each of its nodes (indices into the node's GPUs)
    replica: int = 0
    port: Optional[int] = None  # fixed port of this replica (port + replica); None: chosen at launch

    @property
    def leader(self) -> str:
        return self.nodes[0]

    @property
    def name(self) -> str:
        """The replica's name, `<deployment>-<replica>`: it names its steps, logs and readiness entry."""
        return f"{self.deployment}-{self.replica}"


def place_replicas(plan: Plan, nodes: tuple[str, ...], gpus_per_node: int) -> tuple[Placed, ...]:
    """Every replica of every deployment, in plan order. Largest first; each replica goes where it
    fits most tightly (best fit), so small replicas pack onto shared nodes and leave whole nodes
    for large ones; a replica's nodes get the same free GPU slots."""
    free = {node: list(range(gpus_per_node)) for node in nodes}
    units = [(dep, k) for dep in plan.deployments for k in range(dep.replicas)]
    placed: dict[tuple[str, int], Placed] = {}
    for dep, k in sorted(units, key=lambda u: (-u[0].nodes, -u[0].gpus_per_node)):
        chosen = _fit(dep, nodes, free)
        if chosen is None:
            raise VerificationError(
                "placement", f"deployment {dep.name} replica {k} needs {dep.nodes} node(s) with "
                f"{dep.gpus_per_node} free GPU(s) each; free now: {', '.join(f'{n}={len(s)}' for n, s in free.items())}")
        slots = tuple(free[chosen[0]][: dep.gpus_per_node])
        for node in chosen:
            free[node] = [s for s in free[node] if s not in slots]
        port = None if dep.port is None else dep.port + k
        placed[(dep.name, k)] = Placed(dep.name, chosen, slots, k, port)
    return tuple(placed[(dep.name, k)] for dep, k in units)


def port_clash(units: tuple[Placed, ...]) -> tuple[Placed, Placed] | None:
    """The first two replicas whose fixed ports are the same on one leader node, or None."""
    seen: dict[tuple[str, int], Placed] = {}
    for unit in units:
        if unit.port is None:
            continue
        key = (unit.leader, unit.port)
        if key in seen:
            return seen[key], unit
        seen[key] = unit
    return None


def _fit(dep: Deployment, nodes: tuple[str, ...], free: dict[str, list[int]]) -> tuple[str, ...] | None:
    order = {node: index for index, node in enumerate(nodes)}
    fits = [n for n in sorted(nodes, key=lambda n: (len(free[n]), order[n])) if len(free[n]) >= dep.gpus_per_node]
    if len(fits) < dep.nodes:
        return None
    fits = sorted(fits[: dep.nodes], key=order.__getitem__)
    common = set(free[fits[0]]).intersection(*(free[n] for n in fits))
    if len(common) < dep.gpus_per_node:
        return None
    for node in fits:
        free[node] = sorted(common) + [s for s in free[node] if s not in common]
    return tuple(fits)
