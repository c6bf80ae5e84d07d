"""What a login node can check of a plan before submitting it (`validate --cluster`): does the
partition have nodes that hold what the job asks per node (sinfo), would Slurm take the job
(`sbatch --test-only`), and are the absolute programs it names where the compute nodes can see
them (here, and on a file system the nodes share)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from dd_slurm.plan.records import Plan
    from dd_slurm.scheduler.sinfo import NodeRow

MEM_UNITS_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
# File systems that are one per machine: a program there is this node's, not the cluster's.
LOCAL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "vfat"})
SYSTEM_DIRS = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/")  # each node has its own, by design


def mem_mb(text: Optional[str]) -> float:
    if not text:
        return 0
    unit = text[-1] if text[-1] in MEM_UNITS_MB else "M"
    return int(text.rstrip("KMGT")) * MEM_UNITS_MB[unit]


def fit_errors(plan: Plan, rows: list[NodeRow]) -> list[str]:
    """One line per field the partition's nodes cannot hold (sinfo's configuration, whatever the
    nodes' state), naming the field and the most any node has. A list of partitions (`gpu,long`,
    as sbatch takes it) fits when one of them does; its errors are the first one's."""
    from dd_slurm.scheduler.sinfo import partition_nodes

    job = plan.job
    names = [n.strip() for n in job.partition.split(",") if n.strip()] if job.partition else [None]
    found = [fit_in(plan, *partition_nodes(rows, name), rows) for name in names]
    return [] if any(not errors for errors in found) else found[0]


def fit_in(plan: Plan, name: Optional[str], nodes: list[NodeRow], rows: list[NodeRow]) -> list[str]:
    job = plan.job
    if not nodes:
        known = ", ".join(sorted({r.partition for r in rows})) or "none"
        return [f"job.partition: {name!r} is not a partition of this cluster (sinfo lists: {known})"
                if name else "job.partition: not set, and this cluster has no default partition"]
    wants = (("job.gpus_per_node", job.gpus_per_node, str(job.gpus_per_node), "gpus", "GPUs"),
             ("job.cpus_per_task", job.cpus_per_task, str(job.cpus_per_task), "cpus", "CPUs"),
             ("job.mem", mem_mb(job.mem), f'"{job.mem}"', "memory_mb", "MB"))
    errors = [f"{field}: {shown} per node, but partition {name}'s nodes have at most "
              f"{max(getattr(n, attr) for n in nodes)} {unit} (sinfo)"
              for field, want, shown, attr, unit in wants if max(getattr(n, attr) for n in nodes) < want]
    fitting = {n.node for n in nodes if n.gpus >= job.gpus_per_node and n.cpus >= job.cpus_per_task
               and n.memory_mb >= mem_mb(job.mem)}
    if not errors and len(fitting) < job.nodes:
        errors.append(f"job.nodes: {job.nodes} nodes, but partition {name} has {len(fitting)} that can each hold "
                      f"the job's per-node request (sinfo)")
    return errors


def mounts(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, file system type) from /proc/self/mountinfo, longest mount point first."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if sep and len(fields) >= 5 and after:
            found.append((fields[4].replace("\\040", " "), after[0]))
    return sorted(found, key=lambda m: len(m[0]), reverse=True)


def file_system(path: str, table: list[tuple[str, str]]) -> Optional[str]:
    for point, kind in table:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return kind
    return None


def programs(plan: Plan) -> Iterable[tuple[str, str]]:
    """(field, absolute path) of each program the plan runs on the nodes."""
    yield "runtime.python", plan.runtime.python
    for index, deployment in enumerate(plan.deployments):
        yield f"deployments[{index}].argv[0]", deployment.argv[0]
    yield "client.argv[0]", plan.client.argv[0]


def path_warnings(plan: Plan, table: list[tuple[str, str]], workspace: Optional[str] = None) -> list[str]:
    """A program missing here, or on a file system of this machine alone (outside the system
    dirs every node has), and a workspace the nodes would not share."""
    warnings = []
    for field, path in programs(plan):
        if not path.startswith("/") or "{" in path:
            continue
        if not os.access(path, os.X_OK):
            warnings.append(f"warning: {field}: {path} is not an executable on this node; the compute nodes need it")
        elif not path.startswith(SYSTEM_DIRS) and file_system(os.path.realpath(path), table) in LOCAL_FILE_SYSTEMS:
            warnings.append(f"warning: {field}: {path} is on a local file system here "
                            f"({file_system(os.path.realpath(path), table)}); the compute nodes need it at the same path")
    if workspace:
        kind = file_system(str(Path(workspace).resolve()), table)
        if kind in LOCAL_FILE_SYSTEMS:
            warnings.append(f"warning: workspace {workspace} is on a local file system here ({kind}); the compute "
                            "nodes must see it at the same path")
    return warnings


def read_mounts() -> list[tuple[str, str]]:
    try:
        return mounts(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return []


def fit_refusal(plan: Plan, commands: Any) -> Optional[str]:
    """For `submit`: one line when the partition's nodes can never hold the job (sbatch would
    queue it forever, pending `PartitionConfig`); None when it fits or sinfo cannot say."""
    from dd_slurm.errors import SchedulerError

    try:
        rows = commands.nodes()
    except SchedulerError:
        return None  # no sinfo here: sbatch stays the judge
    errors = [e for e in fit_errors(plan, rows) if not e.startswith("job.partition:")]  # sbatch judges names
    return "; ".join(errors) + "; nothing was submitted (dd-slurm validate --cluster checks this)" if errors else None


def cluster_report(plan: Plan, commands: Any, clock: Any, workspace: Optional[str],
                   environ: Optional[dict] = None) -> dict[str, list[str]]:
    """{"errors": ..., "warnings": ...}: the forwarded variables present here, the fit against
    sinfo, then `sbatch --test-only` of the script `submit` would render (in a private temporary
    dir) when the fit holds, then the programs' and the workspace's paths."""
    import tempfile

    from dd_slurm.control.preview import preview_script
    from dd_slurm.errors import InvalidInput, SchedulerError
    from dd_slurm.scheduler.render import forwarded_values

    errors = []
    try:
        forwarded_values(plan, environ if environ is not None else os.environ)
    except InvalidInput as err:
        errors.append(str(err))
    errors += fit_errors(plan, commands.nodes())
    if not errors:
        with tempfile.TemporaryDirectory(prefix="dd-slurm-validate-") as scratch:
            script = Path(scratch) / "job.sbatch"
            script.write_text(preview_script(plan, Path(workspace or scratch).resolve(), clock, commands.bin_dir))
            try:
                commands.test_only(script)
            except SchedulerError as err:
                errors.append(f"job: sbatch --test-only refuses it: {err}")
    return {"errors": errors, "warnings": path_warnings(plan, read_mounts(), workspace)}
