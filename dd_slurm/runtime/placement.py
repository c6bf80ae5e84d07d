"""Which nodes and GPU slots each deployment gets (pure). The client runs on the batch node."""

from __future__ import annotations

import attrs

from dd_slurm.errors import VerificationError
from dd_slurm.plan import Deployment, Plan


@attrs.frozen
class Placed:
    deployment: str
    nodes: tuple[str, ...]
    gpu_slots: tuple[int, ...]  # the same slots on each of its nodes (indices into the node's GPUs)

    @property
    def leader(self) -> str:
        return self.nodes[0]


def place(plan: Plan, nodes: tuple[str, ...], gpus_per_node: int) -> dict[str, Placed]:
    """First fit, largest deployments first; each deployment's nodes get the same free GPU slots."""
    free = {node: list(range(gpus_per_node)) for node in nodes}
    placed: dict[str, Placed] = {}
    order = sorted(plan.deployments, key=lambda d: (-d.nodes, -d.gpus_per_node))
    for dep in order:
        chosen = _fit(dep, nodes, free)
        if chosen is None:
            raise VerificationError(
                "placement", f"deployment {dep.name} needs {dep.nodes} node(s) with {dep.gpus_per_node} free GPU(s) "
                f"each; free now: {', '.join(f'{n}={len(s)}' for n, s in free.items())}")
        slots = tuple(free[chosen[0]][: dep.gpus_per_node])
        for node in chosen:
            free[node] = [s for s in free[node] if s not in slots]
        placed[dep.name] = Placed(dep.name, chosen, slots)
    return {dep.name: placed[dep.name] for dep in plan.deployments}


def _fit(dep: Deployment, nodes: tuple[str, ...], free: dict[str, list[int]]) -> tuple[str, ...] | None:
    fits = [n for n in sorted(nodes, key=lambda n: -len(free[n])) if len(free[n]) >= dep.gpus_per_node]
    fits = sorted(fits[: dep.nodes], key=nodes.index) if len(fits) >= dep.nodes else []
    if not fits:
        return None
    common = set(free[fits[0]]).intersection(*(free[n] for n in fits))
    if len(common) < dep.gpus_per_node:
        return None
    for node in fits:
        free[node] = sorted(common) + [s for s in free[node] if s not in common]
    return tuple(fits)
