"""Which shard of a run an attempt is: the run's shard dirs, the shard an array task runs, and the
shard an attempt record claims, validated (used by both planes)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.attempt_files import is_run_dir
from dd_slurm.store.attempt_record import read_record
from dd_slurm.store.run_record import read_run


def shard_dirs(run_dir: Path) -> list[Path]:
    """The run's shard attempt dirs, in task order (from the validated run record)."""
    record = read_run(run_dir)
    attempts = Path(run_dir).resolve().parent.parent / "attempts"
    return [attempts / name for name in record["shards"]]


def select_shard(path: str | Path, environ: Mapping[str, str]) -> Path:
    """`dd-slurm run <run dir>` inside array task i: shard i of the run. Any other path is itself."""
    if not is_run_dir(Path(path)):
        return Path(path)
    record = read_run(Path(path))
    task = environ.get("SLURM_ARRAY_TASK_ID", "")
    if not task.isdigit() or int(task) >= record["num_shards"]:
        raise AttemptDirError(f"{path}: SLURM_ARRAY_TASK_ID={task!r} names no shard of this run "
                              f"(0..{record['num_shards'] - 1})")
    array_job = environ.get("SLURM_ARRAY_JOB_ID")
    if record.get("job_id") and array_job and array_job != record["job_id"]:
        raise AttemptDirError(f"{path}: this run is job {record['job_id']}, not SLURM_ARRAY_JOB_ID={array_job}")
    shard = shard_dirs(Path(path))[int(task)]
    if shard.is_symlink() or not shard.is_dir():
        raise AttemptDirError(f"{shard}: shard {task} of {record['run_id']} is missing or not a directory")
    shard_of(read_record(shard), environ, expected=(record["run_id"], int(task)))
    return shard


def shard_of(record: Mapping[str, Any], environ: Mapping[str, str],
             expected: Optional[tuple[str, int]] = None) -> tuple[int, int]:
    """(shard index, number of shards) of an attempt record as read_record returns it (the index
    below its count); (0, 1) for a plain attempt. Inside an array task the index must be the
    task's own, and with `expected` (run id, index) the record must name that shard."""
    shard = record.get("shard")
    if shard is None:
        return 0, 1
    index, count = shard["index"], shard["count"]  # 0 <= index < count: read_record checked it
    if expected and (shard.get("run_id"), index) != expected:
        raise AttemptDirError(f"{files.RECORD}: shard {shard!r} is not shard {expected[1]} of run {expected[0]}")
    task = environ.get("SLURM_ARRAY_TASK_ID")
    if task is not None and task != str(index):
        raise AttemptDirError(f"{files.RECORD}: shard {index}, but this is array task {task}")
    return index, count
