"""The attempt record (control-plane side): submission, observations, cancel requests.

One writer: every change is a locked read-modify-write ending in an atomic replace, so concurrent
`status` calls never lose each other's updates and readers never see a torn file. Observations are
kept in time order whatever order their writers finish in, and `last_seen` never moves backwards.
Every value read back is validated before use: a record that does not have the shape written here
is an AttemptDirError naming the field, never a value passed on (a `job_id` of `--all` never
reaches scancel). The record is checked as plain data (store/shapes), without attrs or cattrs: a
fresh `status` reads and writes it on every call; tests/store/attempt_reference.py declares it as
attrs classes, and a test holds the two to the same values and the same errors.
"""

from __future__ import annotations

import bisect
import fcntl
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.plan.fields import FieldError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic
from dd_slurm.store.record_fields import (
    BOOL,
    CANCEL_REQUEST,
    CLUSTER,
    INT,
    SUBMISSION,
    TEXT,
    job_id,
    optional_text,
    positive,
    state_word,
    wall_time,
)
from dd_slurm.store.shapes import REQUIRED, Invalid, checked, items, optional, record

__all__ = ("add_observation", "checked_record", "new_record", "read_record", "settled", "update_record")

MAX_OBSERVATIONS = 50

# One scheduler observation as `status` persists it (scheduler/observe.Observation), timed.
OBSERVED = record([("time", wall_time, REQUIRED), ("state", state_word, REQUIRED), ("terminal", BOOL, REQUIRED),
                   ("job_id", optional(TEXT), None), ("exit_code", optional(INT), None), ("signal", optional(INT), None),
                   ("raw_state", optional_text, None), ("source", TEXT, "none"), ("reason", optional_text, None)])


def _shard_in_run(shard: dict[str, Any]) -> None:
    if not 0 <= shard["index"] < shard["count"]:
        raise FieldError(f"index {shard['index']} is not below its count {shard['count']}")


# A shard's place in its run: the run's id, its task index and the number of shards.
SHARD_OF = record([("run_id", TEXT, REQUIRED), ("index", INT, REQUIRED), ("count", INT, REQUIRED)], whole=_shard_in_run)

# attempt.json: written at staging, then by submit, status, list and cancel. Every field is
# optional, so a record from an earlier step (or a hand-made fixture) still reads.
ATTEMPT_RECORD = record([
    ("job_id", job_id, None), ("submitted_at", wall_time, None), ("last_seen", wall_time, None),
    ("observations", items(OBSERVED), []), ("cancel_requests", items(CANCEL_REQUEST), []),
    ("attempt_id", optional(TEXT), None), ("plan_digest", optional(TEXT), None), ("bundle_digest", optional(TEXT), None),
    ("bundle_dir", optional(TEXT), None), ("job_name", optional(TEXT), None), ("staged_at", wall_time, None),
    ("reconcile_deadline_s", positive, None), ("shard", optional(SHARD_OF), None),
    ("array_job_id", job_id, None), ("submit_started_at", wall_time, None), ("submit_error", optional_text, None),
    ("submission", optional(SUBMISSION), None), ("cluster", optional(CLUSTER), None)])


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
    """`data` in its JSON form, every field checked (ATTEMPT_RECORD); an AttemptDirError naming
    the file and the first wrong field otherwise."""
    try:
        return checked(data, ATTEMPT_RECORD)
    except Invalid as err:
        raise AttemptDirError(f"{path}: not an attempt record ({err})") from None


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
