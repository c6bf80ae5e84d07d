"""The allocation as Slurm describes it to the batch script (SLURM_* variables), read once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import attrs

from dd_slurm.errors import VerificationError
from dd_slurm.runtime.hostlist import expand_hostlist


@attrs.frozen
class Allocation:
    job_id: str
    nodes: tuple[str, ...]
    gpus_per_node: int
    batch_node: str
    cuda_visible_devices: Optional[str]

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> Allocation:
        job_id = env.get("SLURM_JOB_ID", "")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", "")
        if not job_id or not nodelist:
            raise VerificationError("not_in_allocation", "SLURM_JOB_ID and SLURM_JOB_NODELIST are not set")
        try:
            nodes = tuple(expand_hostlist(nodelist))
        except ValueError as err:
            raise VerificationError("hosts", f"SLURM_JOB_NODELIST {nodelist!r}: {err}") from None
        declared = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
        if declared and int(declared) != len(nodes):
            raise VerificationError("hosts", f"SLURM_JOB_NUM_NODES={declared} but the node list has {len(nodes)}")
        return cls(job_id, nodes, _gpus(env), env.get("SLURMD_NODENAME") or nodes[0],
                   env.get("CUDA_VISIBLE_DEVICES"))


def _gpus(env: Mapping[str, str]) -> int:
    value = env.get("SLURM_GPUS_ON_NODE")
    if value:
        return int(value)
    devices = env.get("CUDA_VISIBLE_DEVICES", "")
    return len([d for d in devices.split(",") if d]) if devices and devices != "NoDevFiles" else 0
