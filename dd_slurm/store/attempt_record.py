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

from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic

MAX_OBSERVATIONS = 50
JOB_ID = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,7})?\Z", re.ASCII)
_TIMES = ("submitted_at", "last_seen", "staged_at")


def read_record(attempt_dir: str | Path) -> dict[str, Any]:
    path = Path(attempt_dir) / files.RECORD
    try:
        record = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise AttemptDirError(f"{attempt_dir}: no {files.RECORD} (not staged by dd-slurm?)") from None
    except (OSError, ValueError, RecursionError) as err:
        raise AttemptDirError(f"{path}: unreadable attempt record ({_short(err)})") from None
    record = checked_record(record, path)
    if record.get("shard") and not record.get("job_id"):
        from dd_slurm.store.run_record import shard_submission

        record.update(shard_submission(Path(attempt_dir), record))  # a shard's job id is on its run
        record = checked_record(record, path)
    return record


def checked_record(record: Any, path: Path | str = files.RECORD) -> dict[str, Any]:
    """The record if it has the shape dd-slurm writes; AttemptDirError naming the field otherwise."""
    if not isinstance(record, dict):
        raise AttemptDirError(f"{path}: not an attempt record (a JSON object was expected)")
    job_id = record.get("job_id")
    if job_id is not None and not (isinstance(job_id, str) and JOB_ID.match(job_id)):
        raise AttemptDirError(f"{path}: job_id {str(job_id)[:40]!r} is not a Slurm job id")
    for name in _TIMES:
        _number(record, name, path, optional=True)
    deadline = _number(record, "reconcile_deadline_s", path, optional=True)
    if deadline is not None and deadline <= 0:
        raise AttemptDirError(f"{path}: reconcile_deadline_s must be positive")
    for name in ("observations", "cancel_requests"):
        items = record.setdefault(name, [])
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise AttemptDirError(f"{path}: {name} must be a list of objects")
    for index, obs in enumerate(record["observations"]):
        _number(obs, "time", f"{path}: observations[{index}]", optional=False)
        if not isinstance(obs.get("state"), str) or not isinstance(obs.get("terminal"), bool):
            raise AttemptDirError(f"{path}: observations[{index}] has no state")
    return record


def _number(record: dict, name: str, path: Path | str, optional: bool) -> Optional[float]:
    value = record.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AttemptDirError(f"{path}: {name} must be a finite number")
    return float(value)


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
        write_atomic(Path(attempt_dir) / files.RECORD, dump_json(record), durable=durable)


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
    return dump_json({"job_id": None, "submitted_at": None, "last_seen": None, "observations": [],
                      "cancel_requests": [], **fields})
