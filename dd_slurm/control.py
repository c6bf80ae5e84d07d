"""Control-plane operations behind the CLI: submit, status, query, cancel. Collaborators passed in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Optional

from dd_slurm.clock import Clock
from dd_slurm.errors import AttemptDirError, InvalidInput
from dd_slurm.scheduler.commands import QueryResult, SlurmCommands
from dd_slurm.scheduler.observe import LagClock, Observation, index_rows, observe
from dd_slurm.store.attempt_record import read_record, update_record
from dd_slurm.store.view import READINESS_NAME, attempt_summary, read_json

JOB_ID = re.compile(r"\d+(?:_\d+)?\Z")


def submit(plan_path: str, workspace: str, commands: SlurmCommands, clock: Clock,
           environ: Mapping[str, str]) -> dict[str, Any]:
    from dd_slurm.bundle.stage import stage
    from dd_slurm.plan import load_plan
    from dd_slurm.scheduler.render import forwarded_names

    plan = load_plan(plan_path)
    missing = [name for name in forwarded_names(plan) if name not in environ]
    if missing:
        raise InvalidInput(f"env.forward: {missing[0]} is not set in this environment, so it cannot be forwarded")
    if plan.job.array is not None:
        from dd_slurm.shards import submit_run

        return submit_run(plan, workspace, commands, clock, {n: environ[n] for n in forwarded_names(plan)})
    staged = stage(plan, workspace, clock, commands.bin_dir)
    try:
        job_id = commands.submit(staged.script, staged.job_name, {n: environ[n] for n in forwarded_names(plan)})
    except Exception as err:
        with update_record(staged.attempt_dir) as record:
            record["submit_error"] = str(err)
        raise
    with update_record(staged.attempt_dir) as record:
        record.update(job_id=job_id, submitted_at=clock.wall())
    return {"attempt_dir": str(staged.attempt_dir), "job_id": job_id}


def observations(result: QueryResult, job_ids: list[str], lag: LagClock) -> list[Observation]:
    sacct = index_rows(result.sacct) if result.sacct is not None else None
    return observe(job_ids, index_rows(result.squeue), sacct, lag, result.sacct_error)


def query(job_ids: list[str], commands: SlurmCommands, clock: Clock) -> list[Observation]:
    bad = [j for j in job_ids if not JOB_ID.match(j)]
    if bad:
        raise InvalidInput(f"job id {bad[0]!r}: expected digits, or digits_digits for an array task")
    return observations(commands.query(job_ids), job_ids, LagClock(clock.wall(), None))


def status(attempt_dir: Path, commands: SlurmCommands, clock: Clock) -> dict[str, Any]:
    summary = attempt_summary(attempt_dir)
    record = read_record(attempt_dir)
    scheduler = observe_attempt(attempt_dir, record, commands, clock)
    if scheduler and scheduler["terminal"] and summary["state"] != "done":
        summary = attempt_summary(attempt_dir)  # the job may have ended between reading disk and asking
    return {"attempt": summary, "scheduler": scheduler, "readiness": read_json(attempt_dir / READINESS_NAME)}


def observe_attempt(attempt_dir: Path, record: dict, commands: SlurmCommands, clock: Clock) -> Optional[dict]:
    job_id = record.get("job_id")
    if not job_id:
        return None
    now = clock.wall()
    seen = record.get("last_seen") or record.get("submitted_at") or now
    lag = LagClock(now, float(record.get("reconcile_deadline_s") or 300.0), {job_id: seen})
    found = observations(commands.query([job_id]), [job_id], lag)
    current = found[0].to_json()
    with update_record(attempt_dir) as fresh:
        fresh["observations"].append({"time": now, **current})
        if current["source"] != "none":
            fresh["last_seen"] = now
    return current


def cancel(attempt_dir: Path, commands: SlurmCommands, clock: Clock) -> dict[str, Any]:
    record = read_record(attempt_dir)
    job_id = record.get("job_id")
    if not job_id:
        raise AttemptDirError(f"{attempt_dir}: never submitted, nothing to cancel")
    with update_record(attempt_dir) as fresh:
        fresh["cancel_requests"].append({"time": clock.wall()})
    commands.cancel(job_id)
    return {"attempt_dir": str(attempt_dir), "job_id": job_id, "cancel_requested": True}
