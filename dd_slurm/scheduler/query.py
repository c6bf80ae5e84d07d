"""`dd-slurm query JOB_ID...`: the scheduler's normalized observation of jobs (used by both planes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dd_slurm.clock import Clock
from dd_slurm.errors import InvalidInput
from dd_slurm.store.attempt_record import JOB_ID

if TYPE_CHECKING:
    from dd_slurm.scheduler.commands import QueryResult, SlurmCommands
    from dd_slurm.scheduler.observe import LagClock, Observation


def observations(result: QueryResult, job_ids: list[str], lag: LagClock) -> list[Observation]:
    from dd_slurm.scheduler.observe import index_rows, observe

    sacct = index_rows(result.sacct) if result.sacct is not None else None
    return observe(job_ids, index_rows(result.squeue), sacct, lag, result.sacct_error)


def query(job_ids: list[str], commands: SlurmCommands, clock: Clock) -> list[Observation]:
    from dd_slurm.scheduler.observe import LagClock

    bad = [j for j in job_ids if not JOB_ID.match(j)]
    if bad:
        raise InvalidInput(f"job id {bad[0][:40]!r}: expected digits, or digits_digits for an array task")
    return observations(commands.query(job_ids), job_ids, LagClock(clock.wall(), None))
