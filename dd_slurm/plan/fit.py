"""Checks that the allocation a plan asks for can hold its deployments: every replica placed on the
job's nodes and GPUs, and no fixed port used twice on one node. Pure: done at validation, so a plan
that could never run is refused before anything is submitted."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dd_slurm.errors import VerificationError
from dd_slurm.plan.fields import FieldError

if TYPE_CHECKING:
    from dd_slurm.plan.records import Plan


def check_fit(plan: Plan) -> None:
    from dd_slurm.plan.placement import place_replicas, port_clash

    nodes = tuple(f"node{i}" for i in range(plan.job.nodes))
    try:
        units = place_replicas(plan, nodes, plan.job.gpus_per_node)
    except VerificationError as err:
        raise FieldError(f"cannot be placed on {plan.job.nodes} node(s) with {plan.job.gpus_per_node} GPU(s) "
                         f"each: {err.detail.split(';')[0]}", ".deployments") from None
    clash = port_clash(units)
    if clash:
        first, second = clash
        index = [d.name for d in plan.deployments].index(second.deployment)
        raise FieldError(f"port {second.port} of replica {second.replica} is also used by {first.deployment} "
                         f"replica {first.replica} on the same node", f".deployments[{index}].port")
