"""attempt.json declared as attrs classes and read through the project's strict converter: the
reference that dd_slurm/store/attempt_record.py's plain-data shape is held to (test_shapes.py).
The same field hooks as the shape (store/record_fields); cancel requests, the cluster and an
adopted submission are the run record's own classes."""

from __future__ import annotations

from typing import Any, Optional

import attrs

from dd_slurm.plan.fields import FieldError
from dd_slurm.store.converter import CONVERTER, register_record, structure_checked
from dd_slurm.store.record_fields import job_id, optional_text, positive, state_word, wall_time
from dd_slurm.store.run_record import CancelRequest, Cluster, Submission


@attrs.frozen(kw_only=True)
class Observed:
    time: float
    state: str
    terminal: bool
    job_id: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    raw_state: Optional[str] = None
    source: str = "none"
    reason: Optional[str] = None


@attrs.frozen(kw_only=True)
class ShardOf:
    run_id: str
    index: int
    count: int


@attrs.frozen(kw_only=True)
class AttemptRecord:
    job_id: Optional[str] = None
    submitted_at: Optional[float] = None
    last_seen: Optional[float] = None
    observations: tuple[Observed, ...] = ()
    cancel_requests: tuple[CancelRequest, ...] = ()
    attempt_id: Optional[str] = None
    plan_digest: Optional[str] = None
    bundle_digest: Optional[str] = None
    bundle_dir: Optional[str] = None
    job_name: Optional[str] = None
    staged_at: Optional[float] = None
    reconcile_deadline_s: Optional[float] = None
    shard: Optional[ShardOf] = None
    array_job_id: Optional[str] = None
    submit_started_at: Optional[float] = None
    submit_error: Optional[str] = None
    submission: Optional[Submission] = None
    cluster: Optional[Cluster] = None


def _shard_in_run(shard: ShardOf) -> None:
    if not 0 <= shard.index < shard.count:
        raise FieldError(f"index {shard.index} is not below its count {shard.count}")


register_record(Observed, time=wall_time, state=state_word, raw_state=optional_text, reason=optional_text)
register_record(ShardOf, whole=_shard_in_run)
register_record(AttemptRecord, job_id=job_id, array_job_id=job_id, reconcile_deadline_s=positive,
                submit_error=optional_text, submitted_at=wall_time, last_seen=wall_time, staged_at=wall_time,
                submit_started_at=wall_time)


def reference_record(data: Any) -> dict[str, Any]:
    """`data` structured as an AttemptRecord and unstructured again; RecordInvalid otherwise."""
    return CONVERTER.unstructure(structure_checked(data, AttemptRecord))
