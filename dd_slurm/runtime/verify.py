"""Checks before anything is launched. Each failure is a VerificationError with a reason code:
bundle_checksum, plan_digest, plan_invalid, gpu_shape, hosts, placement, paths, executable_missing,
port_busy, image_missing, image_digest."""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Optional

from dd_slurm.bundle.manifest import verify_bundle
from dd_slurm.errors import PlanError, VerificationError
from dd_slurm.plan.io import parse_plan
from dd_slurm.plan.records import Plan
from dd_slurm.runtime.context import Allocation


def check_bundle(bundle_dir: Path, expected_digest: str) -> None:
    problems = verify_bundle(bundle_dir, expected_digest)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise VerificationError("bundle_checksum", problems[0] + more)


def verified_by_entry(verified: Optional[tuple[str, str]], bundle_dir: Path, digest: str) -> bool:
    """Whether the entry point of this very process verified this bundle, every file, against this
    digest before anything of it was imported (hashing it all again would only add time)."""
    if verified is None:
        return False
    directory, checked = verified
    return checked == digest and os.path.realpath(directory) == os.path.realpath(bundle_dir)


def check_plan(plan_path: Path, expected_digest: str) -> Plan:
    raw = plan_path.read_bytes()
    actual = hashlib.sha256(raw).hexdigest()
    if actual != expected_digest:
        raise VerificationError("plan_digest", f"plan.json sha256 {actual[:16]}… is not the expected {expected_digest[:16]}…")
    try:
        return parse_plan(raw)
    except PlanError as err:
        raise VerificationError("plan_invalid", str(err)) from None


def check_gpu_shape(plan: Plan, alloc: Allocation) -> None:
    if len(alloc.nodes) != plan.job.nodes:
        raise VerificationError("gpu_shape", f"allocation has {len(alloc.nodes)} nodes, the plan needs {plan.job.nodes}")
    if alloc.gpus_per_node < plan.job.gpus_per_node:
        raise VerificationError("gpu_shape", f"SLURM_GPUS_ON_NODE={alloc.gpus_per_node}, the plan needs "
                                             f"{plan.job.gpus_per_node} per node")


def check_hosts(nodes: Iterable[str]) -> None:
    for node in nodes:
        try:
            socket.getaddrinfo(node, None)
        except OSError as err:
            raise VerificationError("hosts", f"node {node} does not resolve ({err})") from None


def check_paths(workspace: Path, *directories: Path) -> None:
    root = workspace.resolve()
    for directory in directories:
        if directory.is_symlink() and root not in directory.resolve().parents:
            raise VerificationError("paths", f"{directory} is a symlink leading out of the workspace")
        if not directory.is_dir():
            raise VerificationError("paths", f"{directory} does not exist")
        info = directory.stat()
        if info.st_uid != os.getuid():
            raise VerificationError("paths", f"{directory} is owned by uid {info.st_uid}, not {os.getuid()}")
        if not os.access(directory, os.W_OK | os.X_OK):
            raise VerificationError("paths", f"{directory} is not writable")


def weights_failure(problem: object, node: str) -> VerificationError:
    """A node's weights problem as read from its answer: a known reason, else `weights_staging`."""
    from dd_slurm.reasons import WEIGHTS_REASONS

    reason = problem.get("reason") if isinstance(problem, dict) else None
    detail = problem.get("detail") if isinstance(problem, dict) else None
    return VerificationError(reason if reason in WEIGHTS_REASONS else "weights_staging",
                             f"{str(detail)[:300] if detail else 'the weights could not be staged'} (on {node})")


def check_probes(results: dict[str, dict], plan: Plan, expected_nodes: Iterable[str]) -> None:
    """Results of the per-node probe step: every node answered, GPUs visible, executables there,
    ports free."""
    for node in expected_nodes:
        found = results.get(node)
        if found is None:
            raise VerificationError("hosts", f"node {node} did not answer the probe")
        if found["visible_gpus"] < plan.job.gpus_per_node:
            raise VerificationError("gpu_shape", f"{node} sees {found['visible_gpus']} GPU(s) in CUDA_VISIBLE_DEVICES, "
                                                 f"the plan needs {plan.job.gpus_per_node}")
        if found.get("missing_images"):
            raise VerificationError("image_missing", f"{found['missing_images'][0]} on {node}")
        if found.get("weights"):
            raise weights_failure(found["weights"][0], node)
        if found["missing_executables"]:
            raise VerificationError("executable_missing", f"{found['missing_executables'][0]} not found on {node}")
        if found["busy_ports"]:
            raise VerificationError("port_busy", f"port {found['busy_ports'][0]} is already in use on {node}")
