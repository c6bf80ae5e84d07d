"""`dd-slurm submit PLAN`: stage the attempt (or the run, for an array plan) and sbatch it; a failed
submission removes what was staged, or keeps it and says where, when the job may exist."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dd_slurm.clock import Clock
from dd_slurm.errors import AttemptDirError, InvalidInput, SchedulerError, SubmissionUnknown
from dd_slurm.store.attempt_record import update_record

if TYPE_CHECKING:
    from dd_slurm.plan.records import Plan
    from dd_slurm.scheduler.commands import SlurmCommands


def submit(plan: Plan, workspace: str, commands: SlurmCommands, clock: Clock,
           environ: Mapping[str, str]) -> dict[str, Any]:
    from dd_slurm.bundle.stage import stage
    from dd_slurm.scheduler.render import forwarded_values

    forward = forwarded_values(plan, environ)
    from dd_slurm.control.cluster_checks import fit_refusal

    refusal = fit_refusal(plan, commands)
    if refusal:
        raise InvalidInput(refusal)
    if plan.job.array is not None:
        from dd_slurm.control.shards import submit_run

        return submit_run(plan, workspace, commands, clock, forward)
    staged = stage(plan, workspace, clock, commands.bin_dir)
    started = clock.wall()
    try:
        done = commands.submit(staged.script, staged.job_name, forward, since=started)
    except Exception as err:
        _after_failed_submit(staged.attempt_dir, err)
        raise
    with update_record(staged.attempt_dir) as record:
        record.update(done.record_fields(started))
    return done.answer(str(staged.attempt_dir))


def _after_failed_submit(attempt_dir: Path, err: BaseException) -> None:
    """Nothing was submitted (sbatch refused, or the name lookup proved no job exists): the staged
    attempt is removed. When that is unknown, it is kept, the error recorded and its dir named."""
    if not isinstance(err, SubmissionUnknown) and isinstance(err, (SchedulerError, InvalidInput)):
        import shutil

        shutil.rmtree(attempt_dir, ignore_errors=True)
        err.args = (f"{err}; the staged attempt {attempt_dir.name} was removed",)
        return
    try:
        with update_record(attempt_dir) as record:
            record["submit_error"] = str(err)
    except (OSError, AttemptDirError):
        pass
    err.args = (f"{err}; the staged attempt is kept at {attempt_dir}",)
