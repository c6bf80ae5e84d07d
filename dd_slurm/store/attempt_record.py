"""The attempt record (control-plane side): submission, observations, cancel requests.

One writer: every change is a locked read-modify-write ending in an atomic replace, so concurrent
`status` calls never lose each other's updates and readers never see a torn file.
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from dd_slurm.errors import AttemptDirError
from dd_slurm.store.atomic import dump_json, write_atomic

RECORD_NAME = "attempt.json"
LOCK_NAME = ".attempt.lock"
MAX_OBSERVATIONS = 50


def read_record(attempt_dir: Path) -> dict[str, Any]:
    path = Path(attempt_dir) / RECORD_NAME
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise AttemptDirError(f"{attempt_dir}: no {RECORD_NAME} (not staged by dd-slurm?)") from None
    except (OSError, ValueError) as err:
        raise AttemptDirError(f"{path}: unreadable attempt record ({err})") from None
    if isinstance(record, dict) and record.get("shard") and not record.get("job_id"):
        from dd_slurm.store.run_record import shard_submission

        record.update(shard_submission(Path(attempt_dir), record))  # a shard's job id is on its run
    return record


@contextmanager
def update_record(attempt_dir: Path, durable: bool = True) -> Iterator[dict[str, Any]]:
    """Yield the record for editing; written back atomically only if the block succeeds.
    `durable=False`: no fsync, for callers updating many records that end with one sync."""
    with open(Path(attempt_dir) / LOCK_NAME, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_record(attempt_dir)
        yield record
        record["observations"] = record.get("observations", [])[-MAX_OBSERVATIONS:]
        write_atomic(Path(attempt_dir) / RECORD_NAME, dump_json(record), durable=durable)


def new_record(**fields: Any) -> bytes:
    return dump_json({"job_id": None, "submitted_at": None, "last_seen": None, "observations": [],
                      "cancel_requests": [], **fields})
