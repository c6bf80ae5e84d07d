"""`dd-slurm query JOB_ID...`: the scheduler's normalized observation of jobs (used by both planes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from dd_slurm.clock import Clock
from dd_slurm.errors import InvalidInput, SchedulerError
from dd_slurm.store.record_fields import JOB_ID

if TYPE_CHECKING:
    from dd_slurm.scheduler.commands import QueryResult, SlurmCommands
    from dd_slurm.scheduler.observe import LagClock, Observation


def observations(result: QueryResult, job_ids: list[str], lag: LagClock) -> list[Observation]:
    from dd_slurm.scheduler.observe import index_rows, observe

    sacct = index_rows(result.sacct) if result.sacct is not None else None
    return observe(job_ids, index_rows(result.squeue), sacct, lag, result.sacct_error)


# slurmdbd 22.05 names a job cancelled while pending `allocation` for a moment after the cancel (seen
# on the lab: sacct said `391|CANCELLED by 0|allocation`, then the job's own name a second later), so
# that name in sacct is no evidence either way.
SACCT_PLACEHOLDER_NAME = "allocation"


def check_job_name(result: QueryResult, job_name: Optional[str], cluster: Optional[Mapping[str, Any]]) -> None:
    """Every row the scheduler gave about an attempt's job carries the name dd-slurm gave that job;
    a row with another name means the id is another job's (asked of another cluster, or an id
    handed out again): a SchedulerError, before anything is believed or cancelled."""
    if not job_name:
        return
    sacct = [row for row in result.sacct or () if row.name != SACCT_PLACEHOLDER_NAME]
    for row in [*result.squeue, *sacct]:
        if row.name != job_name:
            job = row.job + (f"_{row.task}" if row.task else "")
            where = f" (it was submitted to cluster {cluster.get('name') or '?'}, tools in {cluster.get('bin_dir')})" \
                if cluster else ""
            raise SchedulerError(f"job {job} here is {row.name[:80]!r}, not this attempt's {job_name!r}: the id "
                                 f"belongs to another job{where}")


def query(job_ids: list[str], commands: SlurmCommands, clock: Clock) -> list[Observation]:
    from dd_slurm.scheduler.observe import LagClock

    bad = [j for j in job_ids if not JOB_ID.match(j)]
    if bad:
        raise InvalidInput(f"job id {bad[0][:40]!r}: expected digits, or digits_digits for an array task")
    return observations(commands.query(job_ids), job_ids, LagClock(clock.wall(), None))
