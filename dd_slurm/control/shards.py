"""Shards: a plan with `job.array` becomes one run of N attempts submitted as ONE Slurm array.

Layout: `runs/<run id>/` holds run.json (the shard ids in task order), plan.json and the batch
script; `attempts/<run id>-s0000/` ... are ordinary attempt dirs (own plan copy, record, journal,
results, logs), each recording its shard index. The script runs `dd-slurm run <run dir>`; inside
task i, `select_shard` picks shard i from the validated run record by SLURM_ARRAY_TASK_ID, so the
script holds no shell logic at all. Shard i's job id is `<array job id>_<i>`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.clock import Clock
from dd_slurm.errors import InvalidInput
from dd_slurm.plan.io import canonical_json, plan_digest
from dd_slurm.plan.records import Array, Plan
from dd_slurm.scheduler.render import ScriptContext, render_script
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import sync_filesystem, write_atomic
from dd_slurm.store.attempt_record import new_record
from dd_slurm.store.run_record import RUNS_DIR, new_run, shard_id, shard_width, update_run
from dd_slurm.store.run_shards import shard_dirs


@attrs.frozen
class StagedRun:
    run_id: str
    run_dir: Path
    shard_dirs: tuple[Path, ...]
    bundle_digest: str
    plan_digest: str
    job_name: str
    script: Path


def array_spec(count: int, max_concurrent: Optional[int]) -> str:
    """sbatch's `--array` value: tasks 0..N-1, at most K at once."""
    return f"0-{count - 1}" + (f"%{max_concurrent}" if max_concurrent else "")


def _array(plan: Plan) -> Array:
    """The plan's `job.array`: runs are staged only for plans that have one."""
    if plan.job.array is None:
        raise ValueError("a run needs a plan with job.array")
    return plan.job.array


def run_context(plan: Plan, ws: Path, run_id: str, bundle_dir: Path, bundle_digest: str,
                bin_dir: Optional[str]) -> ScriptContext:
    """The run's script context: the run dir stands where an attempt dir would, and each task's
    batch log goes to its own shard's logs dir (`%4a` is Slurm's zero-padded task id)."""
    count = plan.job.shards
    log = f"{ws}/attempts/{run_id}-s%{shard_width(count)}a/{files.LOGS_DIR}/{files.ARRAY_BATCH_LOG}"
    from dd_slurm.bundle.manifest import entry_sha256

    return ScriptContext(run_id, str(ws / RUNS_DIR / run_id), str(bundle_dir), bundle_digest, plan_digest(plan),
                         bin_dir, array=array_spec(count, _array(plan).max_concurrent), log_pattern=log,
                         entry_sha256=entry_sha256())


def render_run(plan: Plan, ws: Path, run_id: str, bundle_dir: Path, bundle_digest: str,
               bin_dir: Optional[str]) -> str:
    return render_script(plan, run_context(plan, ws, run_id, bundle_dir, bundle_digest, bin_dir))


def stage_run(plan: Plan, workspace: str | Path, clock: Clock, bin_dir: Optional[str] = None) -> StagedRun:
    """One bundle, one run dir, N shard attempt dirs; each appears whole (renamed into place) and
    the lot is made durable with one file-system sync."""
    from dd_slurm.bundle.stage import ensure_bundle, new_attempt_id, workspace_path

    ws = workspace_path(workspace)
    bundle_digest, bundle_dir = ensure_bundle(ws)
    run_id = new_attempt_id(plan, clock)
    ctx = run_context(plan, ws, run_id, bundle_dir, bundle_digest, bin_dir)
    runs, attempts = ws / RUNS_DIR, ws / "attempts"
    tmp_run, final = runs / f".tmp-{run_id}", runs / run_id
    tmp_run.mkdir(mode=0o700)
    shards: list[Path] = []
    try:
        _write_run(tmp_run, plan, ctx, clock)
        for index in range(plan.job.shards):
            shards.append(_stage_shard(attempts, tmp_run / files.PLAN, ctx, index, plan, clock))
        os.rename(tmp_run, final)
    except BaseException:
        for shard in shards:
            shutil.rmtree(shard, ignore_errors=True)
        raise
    finally:
        if tmp_run.exists():
            shutil.rmtree(tmp_run)
    sync_filesystem(ws)
    return StagedRun(run_id, final, tuple(shards), bundle_digest, ctx.plan_digest, ctx.job_name, final / files.SCRIPT)


def stage_run_summary(plan: Plan, workspace: str, clock: Clock, environ: Mapping[str, str]) -> dict[str, Any]:
    """`dd-slurm stage` of an array plan: the run dir stands where the attempt dir would."""
    run = stage_run(plan, workspace, clock, environ.get("DD_SLURM_BIN_DIR") or None)
    return {"attempt_dir": str(run.run_dir), "shards": [str(d) for d in run.shard_dirs],
            "bundle_digest": run.bundle_digest, "plan_digest": run.plan_digest, "job_name": run.job_name}


def _write_run(directory: Path, plan: Plan, ctx: ScriptContext, clock: Clock) -> None:
    count = plan.job.shards
    write_atomic(directory / files.PLAN, canonical_json(plan), mode=0o400, durable=False)
    write_atomic(directory / files.SCRIPT, render_script(plan, ctx).encode(), mode=0o500, durable=False)
    write_atomic(directory / files.RUN_RECORD, new_run(
        run_id=ctx.attempt_id, num_shards=count, max_concurrent=_array(plan).max_concurrent,
        shards=[shard_id(ctx.attempt_id, i, count) for i in range(count)], plan_digest=ctx.plan_digest,
        bundle_digest=ctx.bundle_digest, bundle_dir=ctx.bundle_dir, job_name=ctx.job_name, staged_at=clock.wall(),
        reconcile_deadline_s=plan.runtime.reconcile_deadline_s), durable=False)


def _stage_shard(attempts: Path, plan_file: Path, ctx: ScriptContext, index: int, plan: Plan, clock: Clock) -> Path:
    count = plan.job.shards
    name = shard_id(ctx.attempt_id, index, count)
    tmp, final = attempts / f".tmp-{name}", attempts / name
    tmp.mkdir(mode=0o700)
    try:
        for sub in (files.LOGS_DIR, files.RESULTS_DIR):
            (tmp / sub).mkdir(mode=0o700)
        os.symlink(os.path.relpath(ctx.bundle_dir, attempts / name), tmp / files.BUNDLE_LINK)
        os.link(plan_file, tmp / files.PLAN)  # the run's read-only plan: one copy, digest-checked by each shard
        fd = os.open(tmp / files.RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as record:  # the dir is private until renamed: no temp file needed
            record.write(new_record(
                attempt_id=name, plan_digest=ctx.plan_digest, bundle_digest=ctx.bundle_digest,
                bundle_dir=ctx.bundle_dir, job_name=ctx.job_name, staged_at=clock.wall(),
                reconcile_deadline_s=plan.runtime.reconcile_deadline_s,
                shard={"run_id": ctx.attempt_id, "index": index, "count": count}))
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return final


def submit_run(plan: Plan, workspace: str, commands: Any, clock: Clock, forward: Mapping[str, str]) -> dict[str, Any]:
    """Stage the run and submit its one array job."""
    staged = stage_run(plan, workspace, clock, commands.bin_dir)
    return submit_run_dir(staged.run_dir, commands, clock, forward)


def submit_run_dir(run_dir: Path, commands: Any, clock: Clock, forward: Mapping[str, str]) -> dict[str, Any]:
    """Submit a staged run, once: claimed under the run record's lock, so two submits cannot both
    reach sbatch; the array job id is recorded on the run (the shards read theirs from it)."""
    with update_run(run_dir) as record:
        if record.get("job_id") or record.get("submit_started_at"):
            raise InvalidInput(f"{run_dir}: already submitted (job {record.get('job_id') or '?'}); "
                               "submit the plan again for a new run")
        record["submit_started_at"] = started = clock.wall()
    try:
        done = commands.submit(Path(run_dir) / files.SCRIPT, record["job_name"], forward, since=started)
    except Exception as err:
        with update_run(run_dir) as fresh:
            fresh.update(submit_error=str(err), submit_started_at=None)
        raise
    with update_run(run_dir) as fresh:
        fresh.update(done.record_fields(started))
    return done.answer(str(run_dir), shards=[str(d) for d in shard_dirs(run_dir)])


def submit_staged_run(run_dir: str, workspace: str, commands: Any, clock: Clock,
                      environ: Mapping[str, str]) -> dict[str, Any]:
    """`dd-slurm submit <run dir>`: a run staged earlier (`dd-slurm stage` of an array plan)."""
    from dd_slurm.bundle.stage import workspace_path
    from dd_slurm.plan.io import load_plan
    from dd_slurm.scheduler.render import forwarded_values

    directory = Path(run_dir).resolve()
    if directory.parent != (workspace_path(workspace) / RUNS_DIR).resolve():
        raise InvalidInput(f"{run_dir}: not a run of workspace {workspace}")
    return submit_run_dir(directory, commands, clock, forwarded_values(load_plan(directory / files.PLAN), environ))
