"""The batch script `submit` would submit for a plan, without writing anything (`render`, and the
script `validate --cluster` hands to `sbatch --test-only`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from dd_slurm.clock import Clock
    from dd_slurm.plan.records import Plan


def preview_script(plan: Plan, workspace: Path, clock: Clock, bin_dir: Optional[str]) -> str:
    """The script (a run's, for an array plan) with the bundle staging would reuse or publish."""
    from dd_slurm.bundle.manifest import entry_sha256, planned_manifest, planned_sources, read_manifest
    from dd_slurm.bundle.stage import new_attempt_id
    from dd_slurm.plan.io import plan_digest
    from dd_slurm.scheduler.render import ScriptContext, render_script

    bundle = workspace / "bundles" / planned_sources()[0]
    try:
        digest = read_manifest(bundle)["digest"]
    except (OSError, ValueError, KeyError):
        digest = planned_manifest()["digest"]
    attempt_id = new_attempt_id(plan, clock)
    if plan.job.array is not None:
        from dd_slurm.control.shards import render_run

        return render_run(plan, workspace, attempt_id, bundle, digest, bin_dir)
    ctx = ScriptContext(attempt_id, str(workspace / "attempts" / attempt_id), str(bundle), digest,
                        plan_digest(plan), bin_dir, entry_sha256=entry_sha256())
    return render_script(plan, ctx)
