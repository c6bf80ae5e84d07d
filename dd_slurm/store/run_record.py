"""The run record (`runs/<run id>/run.json`): the shards of one array submission, in task order.

Written by `submit` (staging, then the array job id), read by `dd-slurm run` inside each task to
find its shard, and by `status`, `cancel` and `list`. What is read back is validated: the shard
ids must be exactly the ones this run's id and size give, so a task can only reach its own shard.
"""

from __future__ import annotations

import fcntl
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic

RUNS_DIR = "runs"
_JOB_ID = re.compile(r"\d+\Z")


def shard_width(count: int) -> int:
    return max(4, len(str(count - 1)))


def shard_id(run_id: str, index: int, count: int) -> str:
    """`<run id>-s0003`: zero-padded so shards sort in task order."""
    return f"{run_id}-s{index:0{shard_width(count)}d}"


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / files.RUN_RECORD).is_file()


def read_run(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / files.RUN_RECORD
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise AttemptDirError(f"{run_dir}: no {files.RUN_RECORD} (not a run of shards)") from None
    except (OSError, ValueError) as err:
        raise AttemptDirError(f"{path}: unreadable run record ({err})") from None
    problem = _problem(record, Path(run_dir).name)
    if problem:
        raise AttemptDirError(f"{path}: invalid run record ({problem})")
    return record


def _problem(record: Any, dir_name: str) -> str | None:
    if not isinstance(record, dict):
        return "not an object"
    count, shards, job_id = record.get("num_shards"), record.get("shards"), record.get("job_id")
    if record.get("run_id") != dir_name:
        return f"run_id is not {dir_name!r}"
    if type(count) is not int or count < 1 or not isinstance(shards, list) or len(shards) != count:
        return "num_shards and shards disagree"
    if shards != [shard_id(dir_name, i, count) for i in range(count)]:
        return "shard ids are not this run's"
    if job_id is not None and not (isinstance(job_id, str) and _JOB_ID.match(job_id)):
        return f"job_id {job_id!r} is not a job id"
    return None


@contextmanager
def update_run(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Yield the record for editing; written back atomically only if the block succeeds."""
    with open(Path(run_dir) / files.RUN_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_run(run_dir)
        yield record
        write_atomic(Path(run_dir) / files.RUN_RECORD, dump_json(record))


def new_run(**fields: Any) -> bytes:
    return dump_json({"job_id": None, "submitted_at": None, "cancel_requests": [], **fields})


def shard_submission(attempt_dir: Path, record: dict[str, Any], runs: dict[str, dict] | None = None) -> dict[str, Any]:
    """A shard's job id (`<array job id>_<index>`), array job id and submission time, from its run's
    record: submit writes the array job id once, on the run, not on every shard. `runs` caches run
    records by id for callers reading many shards. {} until the run is submitted."""
    shard = record.get("shard")
    if not isinstance(shard, dict):
        return {}
    run_id = shard.get("run_id")
    if not isinstance(run_id, str) or type(shard.get("index")) is not int:
        return {}
    run = (runs or {}).get(run_id)
    if run is None:
        run = read_run(Path(attempt_dir).parent.parent / RUNS_DIR / run_id)
        if runs is not None:
            runs[run_id] = run
    if not run.get("job_id") or Path(attempt_dir).name not in run["shards"][shard["index"]:shard["index"] + 1]:
        return {}
    return {"job_id": f"{run['job_id']}_{shard['index']}", "array_job_id": run["job_id"],
            "submitted_at": run.get("submitted_at")}
