"""The attempt record (control-plane side): submission, observations, cancel requests.

One writer: every change is a locked read-modify-write ending in an atomic replace, so concurrent
`status` calls never lose each other's updates and readers never see a torn file. Observations are
kept in time order whatever order their writers finish in, and `last_seen` never moves backwards.
Every value read back is validated before use: a record that does not have the shape written here
is an AttemptDirError naming the field, never a value passed on (a `job_id` of `--all` never
reaches scancel).
"""

from __future__ import annotations

import bisect
import fcntl
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.errors import AttemptDirError
from dd_slurm.plan.fields import FieldError, check_text
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic
from dd_slurm.store.converter import CONVERTER, free_text, register_record, structure_record
from dd_slurm.store.run_record import CancelRequest, Cluster, Submission

MAX_OBSERVATIONS = 50
JOB_ID = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,7})?\Z", re.ASCII)


@attrs.frozen(kw_only=True)
class Observed:
    """One scheduler observation as `status` persists it (scheduler/observe.Observation), timed."""

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
    """A shard's place in its run: the run's id, its task index and the number of shards."""

    run_id: str
    index: int
    count: int


@attrs.frozen(kw_only=True)
class AttemptRecord:
    """attempt.json: written at staging, then by submit, status, list and cancel. Every field is
    optional, so a record from an earlier step (or a hand-made fixture) still reads."""

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


def _job_id(value: Any, _type: Any) -> Optional[str]:
    if value is not None and type(value) is not str:
        raise FieldError("must be a string")
    if value is not None and not JOB_ID.match(value):
        raise FieldError(f"{value[:40]!r} is not a Slurm job id")
    return value


def _time(value: Any, _type: Any = None) -> Optional[float]:
    """A wall-clock time or a duration: a finite number (JSON's NaN and Infinity are not)."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise FieldError("must be a finite number")
    return float(value)


def _state(value: Any, _type: Any) -> str:
    """A job state word (a scheduler JobState member, a str, or its value read back), as plain
    text; the vocabulary is not checked here: a settled `status` does not import the scheduler."""
    if not isinstance(value, str):
        raise FieldError("must be a string")
    check_text(value)
    return str(value)


def _positive(value: Any, _type: Any) -> Optional[float]:
    number = _time(value)
    if number is not None and number <= 0:
        raise FieldError("must be positive")
    return number


def _optional_text(value: Any, _type: Any) -> Optional[str]:
    return None if value is None else free_text(value)


register_record(Observed, time=_time, state=_state, raw_state=_optional_text, reason=_optional_text)
def _shard_in_run(shard: ShardOf) -> None:
    if not 0 <= shard.index < shard.count:
        raise FieldError(f"index {shard.index} is not below its count {shard.count}")


register_record(ShardOf, whole=_shard_in_run)
register_record(AttemptRecord, job_id=_job_id, array_job_id=_job_id, reconcile_deadline_s=_positive,
                submit_error=_optional_text, submitted_at=_time, last_seen=_time, staged_at=_time,
                submit_started_at=_time)


def read_record(attempt_dir: str | Path, runs: Optional[dict[str, dict]] = None) -> dict[str, Any]:
    """attempt.json validated, in its JSON form (every field present); a shard's job id is
    taken from its run's record until the shard's own record has one (`runs` caches run records
    by id, for callers reading many shards)."""
    path = Path(attempt_dir) / files.RECORD
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise AttemptDirError(f"{attempt_dir}: no {files.RECORD} (not staged by dd-slurm?)") from None
    except (OSError, ValueError, RecursionError) as err:
        raise AttemptDirError(f"{path}: unreadable attempt record ({_short(err)})") from None
    record = checked_record(data, path)
    if record["shard"] and not record["job_id"]:
        from dd_slurm.store.run_record import shard_submission

        record = checked_record({**record, **shard_submission(Path(attempt_dir), record, runs)}, path)
    return record


def checked_record(data: Any, path: Path | str = files.RECORD) -> dict[str, Any]:
    """`data` as the one converter structures an AttemptRecord, in its JSON form; an
    AttemptDirError naming the file and the first wrong field otherwise."""
    return CONVERTER.unstructure(structure_record(data, AttemptRecord, str(path), "an attempt record"))


def _short(err: BaseException) -> str:
    return "nested too deeply" if isinstance(err, RecursionError) else str(err)[:200]


@contextmanager
def update_record(attempt_dir: Path, durable: bool = True) -> Iterator[dict[str, Any]]:
    """Yield the record for editing; written back atomically only if the block succeeds.
    `durable=False`: no fsync, for callers updating many records that end with one sync."""
    with open(Path(attempt_dir) / files.RECORD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_record(attempt_dir)
        yield record
        record["observations"] = record.get("observations", [])[-MAX_OBSERVATIONS:]
        write_atomic(Path(attempt_dir) / files.RECORD, dump_json(checked_record(record)), durable=durable)


def add_observation(record: dict[str, Any], now: float, observation: dict[str, Any]) -> None:
    """Insert in time order (a slower `status` that finishes later still lands where its time
    says); `last_seen` moves only forward, and only for an observation Slurm actually made."""
    observations = record["observations"]
    times = [o["time"] for o in observations]
    observations.insert(bisect.bisect_right(times, now), {"time": now, **observation})
    if observation.get("source") != "none":
        record["last_seen"] = max(now, record.get("last_seen") or now)


def settled(record: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The persisted terminal observation from sacct, if any: accounting's final word, which no
    later query can change, so no scheduler call is needed for this attempt again."""
    for obs in reversed(record.get("observations") or []):
        if obs.get("terminal") and obs.get("source") == "sacct":
            return {k: v for k, v in obs.items() if k != "time"}
    return None


def new_record(**fields: Any) -> bytes:
    """A staged attempt's first record (structured first: a field staging got wrong raises here)."""
    return dump_json(checked_record(fields))
