"""Step specs -> srun argument vectors and explicit environments (pure).

Every allocation-local step runs as
  srun --jobid=J --nodes=1 --ntasks=1 --nodelist=N --overlap --gres=gpu:G|none
       --cpus-per-task=C --export=NONE --kill-on-bad-exit=1 --job-name=S
       PYTHON -I -S BUNDLE/entry.py _step SPEC.json
and the on-node launcher (`stepexec`) execs the program with exactly the spec's environment.
`--overlap` lets steps share a node's CPUs without waiting on each other; GPU steps request all
of the job's GPUs on their node (so device cgroups admit them) and the launcher narrows
CUDA_VISIBLE_DEVICES to the slots placement gave them, so co-located deployments never share.
"""

from __future__ import annotations

from typing import Mapping, Optional

import attrs

from dd_slurm.fields import expand
from dd_slurm.plan import Deployment, Env, Plan
from dd_slurm.runtime.placement import Placed

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@attrs.frozen
class StepSpec:
    name: str
    node: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    gres_gpus: int = 0
    gpu_slots: tuple[int, ...] = ()
    cpus: int = 1
    deployment: Optional[str] = None
    rank: int = 0

    def to_json(self) -> dict:
        return {"name": self.name, "node": self.node, "argv": list(self.argv), "env": dict(self.env),
                "gpu_slots": list(self.gpu_slots), "deployment": self.deployment, "rank": self.rank}


@attrs.frozen
class Layout:
    """Paths and identity the placeholders and environments need."""

    attempt_id: str
    attempt_dir: str
    endpoints_file: str
    results_dir: str
    shard_index: int = 0
    num_shards: int = 1


def step_env(env: Env, ambient: Mapping[str, str], layout: Layout, role: str) -> dict[str, str]:
    """The plan's `set` values, the `forward` names that exist, and the runtime's own variables."""
    out = {"PATH": DEFAULT_PATH, "LC_ALL": "C.UTF-8"}
    out.update({name: ambient[name] for name in env.forward if name in ambient})
    out.update(env.set)
    out.update(DD_SLURM_ATTEMPT_ID=layout.attempt_id, DD_SLURM_ROLE=role,
               DD_SLURM_ATTEMPT_DIR=layout.attempt_dir, DD_SLURM_ENDPOINTS_FILE=layout.endpoints_file)
    return out


def common_values(layout: Layout) -> dict[str, str]:
    return {"endpoints_file": layout.endpoints_file, "results_dir": layout.results_dir,
            "attempt_dir": layout.attempt_dir, "shard_index": str(layout.shard_index),
            "num_shards": str(layout.num_shards)}


def deployment_steps(plan: Plan, dep: Deployment, placed: Placed, layout: Layout,
                     ambient: Mapping[str, str]) -> list[StepSpec]:
    """One step per node of the deployment: the leader's argv on rank 0, followers' on the rest."""
    steps = []
    for rank, node in enumerate(placed.nodes):
        values = {**common_values(layout), "port": str(dep.port), "host": node, "leader_host": placed.leader,
                  "node_rank": str(rank), "num_nodes": str(dep.nodes)}
        template = dep.argv if rank == 0 else (dep.follower_argv or ())
        name = f"deploy-{dep.name}-{rank}"
        steps.append(StepSpec(
            name=name, node=node, argv=tuple(expand(a, values) for a in template),
            env=step_env(dep.env, ambient, layout, name), gres_gpus=plan.job.gpus_per_node if dep.gpus_per_node else 0,
            gpu_slots=placed.gpu_slots, cpus=plan.job.cpus_per_task, deployment=dep.name, rank=rank,
        ))
    return steps


def client_step(plan: Plan, node: str, layout: Layout, ambient: Mapping[str, str], preflight: bool) -> StepSpec:
    name = "preflight" if preflight else "client"
    template = plan.client.preflight_argv if preflight else plan.client.argv
    argv = tuple(expand(a, common_values(layout)) for a in template or ())
    return StepSpec(name=name, node=node, argv=argv, env=step_env(plan.client.env, ambient, layout, name),
                    cpus=plan.job.cpus_per_task)


def srun_argv(spec: StepSpec, srun: str, job_id: str, interpreter: list[str], entry: str,
              spec_path: str) -> list[str]:
    gres = f"gpu:{spec.gres_gpus}" if spec.gres_gpus else "none"
    return [srun, f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={spec.node}", "--overlap",
            f"--gres={gres}", f"--cpus-per-task={spec.cpus}", "--export=NONE", "--kill-on-bad-exit=1",
            f"--job-name={spec.name}", *interpreter, entry, "_step", spec_path]


def node_command_argv(srun: str, job_id: str, nodes: tuple[str, ...], interpreter: list[str], entry: str,
                      command: list[str], name: str, gres_gpus: int = 0, identity: str = "") -> list[str]:
    """One task on each of `nodes` (probes before launch, leftover scans in cleanup). `identity`
    is the explicit export list (attempt id and role: plain identifiers, no commas)."""
    gres = f"gpu:{gres_gpus}" if gres_gpus else "none"
    return [srun, f"--jobid={job_id}", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", "--overlap", f"--gres={gres}", "--cpus-per-task=1",
            f"--export={identity or 'NONE'}", f"--job-name={name}", *interpreter, entry, *command]
