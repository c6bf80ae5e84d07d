"""Step specs -> srun argument vectors and explicit environments (pure).

Every allocation-local step runs as
  srun --jobid=J --nodes=1 --ntasks=1 --nodelist=N --overlap --gres=gpu:G|none
       --cpus-per-task=C --export=NAMES --kill-on-bad-exit=1 --job-name=S
       PYTHON -I -S BUNDLE/entry.py _step SPEC.json
and the on-node launcher (`stepexec`) expands the argv (choosing a free port first when the plan
left it to the runtime) and execs the program with exactly the spec's environment plus the values
of the spec's `pass` names, which srun carries from the supervisor's own environment
(`--export=NAMES`: those names and Slurm's SLURM_* only). Spec files hold names, never the
values of forwarded variables or of the attempt's key.
`--overlap` lets steps share a node's CPUs without waiting on each other; GPU steps request all
of the job's GPUs on their node (so device cgroups admit them) and the launcher narrows
CUDA_VISIBLE_DEVICES to the slots placement gave them, so co-located replicas never share.
A held step (deployments, launched while the preflight runs) is released through srun's stdin,
which srun forwards to its task on whatever node: the launcher reads `go` before it looks at the
program, chooses a port or writes its record; end of input instead (the supervisor withdrew it,
or is gone) ends it without running anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import attrs

from dd_slurm.plan.fields import expand
from dd_slurm.plan.placement import Placed
from dd_slurm.plan.records import Container, Deployment, Env, Plan
from dd_slurm.store import attempt_files as files

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
CONTAINER_PYTHON = "/usr/bin/python3"  # runs the launcher inside an image (the plan's runtime.python is the host's)
RUNTIME_NAMES = ("DD_SLURM_ATTEMPT_ID", "DD_SLURM_ROLE")  # srun carries these from its own environment


@attrs.frozen
class ContainerRun:
    """A step run inside an image through pyxis: the plan's mounts plus the attempt's own dirs at
    the same paths, and the working directory."""

    image: str
    mounts: tuple[str, ...]
    workdir: str

    def srun_options(self, names: str) -> list[str]:
        """`names`: the environment names srun exports, kept over any value the image sets."""
        return [f"--container-image={self.image}", f"--container-mounts={','.join(self.mounts)}",
                f"--container-workdir={self.workdir}", f"--container-env={names}", "--no-container-mount-home"]


@attrs.frozen
class StepSpec:
    name: str
    node: str
    argv: tuple[str, ...]  # the plan's template; expanded on the node with `values`
    values: Mapping[str, str]
    env: Mapping[str, str]  # plain values only (the plan's `set`, the runtime's own variables)
    passed: tuple[str, ...] = ()  # names whose values travel by environment (forwarded, the key)
    gres_gpus: int = 0
    gpu_slots: tuple[int, ...] = ()
    cpus: int = 1
    deployment: Optional[str] = None
    replica: int = 0
    rank: int = 0
    choose_port: bool = False  # the launcher picks a free port on its node for {port}
    avoid_ports: tuple[int, ...] = ()  # fixed ports of other replicas on this node
    held: bool = False  # launched early: the launcher waits for "go" on its stdin before it looks at its program
    container: Optional[ContainerRun] = None

    @property
    def unit(self) -> str:
        """The replica this step belongs to (`<deployment>-<replica>`), or the step's own name."""
        return f"{self.deployment}-{self.replica}" if self.deployment else self.name

    def program(self) -> str:
        """argv[0] as it will run (a port still to be chosen expands as 0)."""
        return expand(self.argv[0], {"port": "0", **self.values}) if self.argv else ""

    def to_json(self) -> dict:
        return {"name": self.name, "node": self.node, "argv": list(self.argv), "values": dict(self.values),
                "env": dict(self.env), "pass": list(self.passed), "gpu_slots": list(self.gpu_slots),
                "deployment": self.deployment, "replica": self.replica, "rank": self.rank,
                "choose_port": self.choose_port, "avoid_ports": list(self.avoid_ports), "held": self.held}


@attrs.frozen
class Layout:
    """Paths and identity the placeholders and environments need."""

    attempt_id: str
    attempt_dir: str
    endpoints_file: str
    results_dir: str
    shard_index: int = 0
    num_shards: int = 1
    bundle_dir: str = ""
    tmpdir: Optional[str] = None  # $SLURM_TMPDIR where the site sets it: staged weights' default place
    uid: int = 0


def weights_path(dep: Deployment, node: str, layout: Layout) -> Optional[str]:
    """`{weights}` on `node`: its node-local copy when staged, the source otherwise."""
    from dd_slurm.runtime.node.weights import copy_path

    weights = dep.weights
    if weights is None or weights.stage != "node_local":
        return None if weights is None else weights.path
    return copy_path(weights.path, weights.local_dir, node, layout.tmpdir, layout.uid)


def container_run(container: Optional[Container], layout: Layout, weights: Optional[str] = None) -> Optional[ContainerRun]:
    """Inside an image the attempt dir, the results dir, the bundle and the weights (`{weights}`,
    read-only) are where they are outside, so every placeholder and the launcher's own paths
    still point where they should."""
    if container is None:
        return None
    own = [d for d in (layout.attempt_dir, layout.results_dir, layout.bundle_dir) if d]
    extra = [f"{weights}:{weights}:ro"] if weights else []
    mounts = tuple(dict.fromkeys([*container.mounts, *(f"{d}:{d}" for d in own), *extra]))
    return ContainerRun(image=container.image, mounts=mounts, workdir=container.workdir or layout.attempt_dir)


def step_env(env: Env, ambient: Mapping[str, str], layout: Layout, role: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """The plan's `set` values and the runtime's own variables, and the names passed by environment:
    forwarded names the supervisor has (a forwarded value overrides the defaults, `set` overrides
    it) and the attempt key's variable."""
    passed = tuple(n for n in env.forward if n in ambient and n not in env.set)
    out = {k: v for k, v in {"PATH": DEFAULT_PATH, "LC_ALL": "C.UTF-8"}.items() if k not in passed}
    out.update(env.set)
    out.update(DD_SLURM_ATTEMPT_ID=layout.attempt_id, DD_SLURM_ROLE=role,
               DD_SLURM_ATTEMPT_DIR=layout.attempt_dir, DD_SLURM_ENDPOINTS_FILE=layout.endpoints_file)
    return out, passed + ((env.api_key_var,) if env.api_key_var else ())


def passed_values(spec: StepSpec, ambient: Mapping[str, str], api_key: str, key_var: Optional[str]) -> dict[str, str]:
    """The values srun must carry for `spec.passed` (the caller's process environment, never a file)."""
    return {n: api_key if n == key_var else ambient[n] for n in spec.passed if n == key_var or n in ambient}


def common_values(layout: Layout) -> dict[str, str]:
    return {"endpoints_file": layout.endpoints_file, "results_dir": layout.results_dir,
            "attempt_dir": layout.attempt_dir, "shard_index": str(layout.shard_index),
            "num_shards": str(layout.num_shards)}


def replica_steps(plan: Plan, dep: Deployment, placed: Placed, layout: Layout, ambient: Mapping[str, str],
                  avoid_ports: tuple[int, ...] = ()) -> list[StepSpec]:
    """One step per node of the replica: the leader's argv on rank 0 (`deploy-<dep>-<k>`), the
    followers' on the rest (`deploy-<dep>-<k>-<rank>`). With an automatic port the leader chooses
    it; followers get it in `values` once it is known (`with_port`)."""
    steps = []
    for rank, node in enumerate(placed.nodes):
        values = {**common_values(layout), "host": node, "leader_host": placed.leader,
                  "node_rank": str(rank), "num_nodes": str(dep.nodes)}
        if placed.port is not None:
            values["port"] = str(placed.port)
        weights = weights_path(dep, node, layout)
        if weights is not None:
            values["weights"] = weights
        name = files.deploy_step(placed.name, rank)
        env, passed = step_env(dep.env, ambient, layout, name)
        steps.append(StepSpec(
            name=name, node=node, argv=tuple(dep.argv if rank == 0 else (dep.follower_argv or ())), values=values,
            env=env, passed=passed, gres_gpus=plan.job.gpus_per_node if dep.gpus_per_node else 0,
            gpu_slots=placed.gpu_slots, cpus=plan.job.cpus_per_task, deployment=dep.name, replica=placed.replica,
            rank=rank, choose_port=placed.port is None and rank == 0, avoid_ports=avoid_ports if rank == 0 else (),
            container=container_run(dep.container, layout, weights)))
    return steps


def with_port(spec: StepSpec, port: int) -> StepSpec:
    """A follower of an automatic-port replica, once its leader has chosen the port."""
    return attrs.evolve(spec, values={**spec.values, "port": str(port)})


def needs_port(spec: StepSpec) -> bool:
    return "port" not in spec.values and not spec.choose_port


def client_step(plan: Plan, node: str, layout: Layout, ambient: Mapping[str, str], preflight: bool) -> StepSpec:
    name = "preflight" if preflight else "client"
    template = plan.client.preflight_argv if preflight else plan.client.argv
    env, passed = step_env(plan.client.env, ambient, layout, name)
    return StepSpec(name=name, node=node, argv=tuple(template or ()), values=common_values(layout), env=env,
                    passed=passed, cpus=plan.job.cpus_per_task, container=container_run(plan.client.container, layout))


def srun_argv(spec: StepSpec, srun: str, job_id: str, interpreter: list[str], entry: str,
              spec_path: str) -> list[str]:
    gres = f"gpu:{spec.gres_gpus}" if spec.gres_gpus else "none"
    exports = ",".join(RUNTIME_NAMES + spec.passed)
    inside = spec.container.srun_options(exports) if spec.container else []
    python = [CONTAINER_PYTHON, *interpreter[1:]] if spec.container else interpreter
    return [srun, f"--jobid={job_id}", "--nodes=1", "--ntasks=1", f"--nodelist={spec.node}", "--overlap",
            f"--gres={gres}", f"--cpus-per-task={spec.cpus}", f"--export={exports}", "--kill-on-bad-exit=1",
            f"--job-name={spec.name}", *inside, *python, entry, "_step", spec_path]


def node_command_argv(srun: str, job_id: str, nodes: tuple[str, ...], interpreter: list[str], entry: str,
                      command: list[str], name: str, gres_gpus: int = 0, identity: str = "") -> list[str]:
    """One task on each of `nodes` (probes before launch, identity checks, leftover scans in
    cleanup). `identity` is the explicit export list (names, or attempt id and role: plain
    identifiers, no commas)."""
    gres = f"gpu:{gres_gpus}" if gres_gpus else "none"
    return [srun, f"--jobid={job_id}", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}", "--overlap", f"--gres={gres}", "--cpus-per-task=1",
            f"--export={identity or 'NONE'}", f"--job-name={name}", *interpreter, entry, *command]
