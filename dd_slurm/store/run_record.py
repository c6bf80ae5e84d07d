"""The run record (`runs/<run id>/run.json`): the shards of one array submission, in task order.

Written by `submit` (staging, then the array job id), read by `dd-slurm run` inside each task to
find its shard, and by `status`, `cancel` and `list`. What is read back is validated: the shard
ids must be exactly the ones this run's id and size give, so a task can only reach its own shard.
"""

from __future__ import annotations

import fcntl
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic
from dd_slurm.store.converter import CONVERTER, free_text, read_record_file, register_omitting, register_record, structure_record
from dd_slurm.store.record_fields import absolute_path, cluster_name, optional_text

RUNS_DIR = "runs"
_JOB_ID = re.compile(r"\d+\Z")


@attrs.frozen(kw_only=True)
class CancelRequest:
    time: float
    via: Optional[str] = None


@attrs.frozen(kw_only=True)
class Cluster:
    """The cluster a job was submitted to, as `submit` saw it: Slurm's ClusterName (null when
    `scontrol show config` did not say), the directory of the Slurm tools it ran, and SLURM_CONF
    when set. status, cancel, list and logs ask that cluster, whatever the shell points at."""

    name: Optional[str]
    bin_dir: Optional[str]
    slurm_conf: Optional[str] = None


@attrs.frozen(kw_only=True)
class Submission:
    """An ambiguous sbatch answer resolved by adopting the job found by its unique name."""

    adopted: bool
    duplicates_cancelled: tuple[str, ...]
    note: str


@attrs.frozen(kw_only=True)
class RunRecord:
    run_id: str
    num_shards: int
    shards: tuple[str, ...]
    max_concurrent: Optional[int]
    plan_digest: str
    bundle_digest: str
    bundle_dir: str
    job_name: str
    staged_at: float
    reconcile_deadline_s: float
    job_id: Optional[str]
    submitted_at: Optional[float]
    cancel_requests: tuple[CancelRequest, ...]
    submit_started_at: Optional[float] = None
    submit_error: Optional[str] = None
    submission: Optional[Submission] = None
    cluster: Optional[Cluster] = None


register_record(CancelRequest)
register_omitting(CancelRequest, "via")  # no null `via`
register_record(Submission, note=free_text)
register_record(Cluster, name=cluster_name, bin_dir=absolute_path, slurm_conf=absolute_path)
register_record(RunRecord, submit_error=optional_text)


def run_json(record: RunRecord) -> dict[str, Any]:
    """The record as run.json holds it."""
    return CONVERTER.unstructure(record)


def _checked_json(record: dict[str, Any]) -> bytes:
    """What a writer made of the record, structured before it lands (a wrong field raises here)."""
    return dump_json(run_json(structure_record(record, RunRecord, files.RUN_RECORD, "a run record")))


def shard_width(count: int) -> int:
    return max(4, len(str(count - 1)))


def shard_id(run_id: str, index: int, count: int) -> str:
    """`<run id>-s0003`: zero-padded so shards sort in task order."""
    return f"{run_id}-s{index:0{shard_width(count)}d}"


def load_run(run_dir: Path) -> RunRecord:
    """run.json validated: its fields (the first wrong one named), and shard ids that are exactly
    the ones this run's id and size give."""
    path = Path(run_dir) / files.RUN_RECORD
    record = read_record_file(path, RunRecord, "a run record")
    if record is None:
        raise AttemptDirError(f"{run_dir}: no {files.RUN_RECORD} (not a run of shards)")
    problem = _problem(record, Path(run_dir).name)
    if problem:
        raise AttemptDirError(f"{path}: invalid run record ({problem})")
    return record


def read_run(run_dir: Path) -> dict[str, Any]:
    """run.json validated (see load_run), in its JSON form."""
    return run_json(load_run(run_dir))


def _problem(record: RunRecord, dir_name: str) -> str | None:
    count, shards, job_id = record.num_shards, record.shards, record.job_id
    if record.run_id != dir_name:
        return f"run_id is not {dir_name!r}"
    if count < 1 or len(shards) != count:
        return "num_shards and shards disagree"
    if list(shards) != [shard_id(dir_name, i, count) for i in range(count)]:
        return "shard ids are not this run's"
    if job_id is not None and not _JOB_ID.match(job_id):
        return f"job_id {job_id!r} is not a job id"
    return None


@contextmanager
def update_run(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Yield the record for editing; written back atomically only if the block succeeds."""
    with open(Path(run_dir) / files.RUN_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_run(run_dir)
        yield record
        write_atomic(Path(run_dir) / files.RUN_RECORD, _checked_json(record))


def new_run(**fields: Any) -> bytes:
    """A staged run's first record (structured first: a field staging got wrong raises here)."""
    return _checked_json({"job_id": None, "submitted_at": None, "cancel_requests": [], **fields})


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
            "submitted_at": run.get("submitted_at"), "cluster": run.get("cluster")}
