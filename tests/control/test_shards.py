"""Shards: the --array value, shard ids, the run record, and how a task finds its own shard."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.clock import FakeClock
from dd_slurm.control.shards import array_spec, stage_run
from dd_slurm.errors import AttemptDirError
from dd_slurm.plan.io import parse_plan
from dd_slurm.scheduler.parse import expand_tasks
from dd_slurm.store.attempt_files import RUN_RECORD
from dd_slurm.store.attempt_record import read_record
from dd_slurm.store.run_record import read_run, shard_id
from dd_slurm.store.run_shards import select_shard, shard_of
from dd_slurm.testing.fake_slurm.arrays import indices, output_path
from dd_slurm.testing.sbatch_directives import read_directives
from tests.runtime.harness import plan_data


def sharded(count: int, max_concurrent=None) -> dict:
    data = plan_data("single-node")
    data["job"]["array"] = {"count": count, "max_concurrent": max_concurrent}
    return data


@given(st.integers(1, 100_000), st.one_of(st.none(), st.integers(1, 100_000)))
def test_array_spec_covers_every_shard_once_with_the_throttle(count: int, max_concurrent) -> None:
    """`--array` names tasks 0..N-1 exactly, and `%K` only when a limit is set (read back the way
    squeue's ranges and the fake sbatch read it)."""
    spec = array_spec(count, max_concurrent)
    assert (list(range(count)), max_concurrent) == indices(spec)
    assert list(range(count)) == expand_tasks(f"[{spec}]")


@given(st.integers(1, 200_000), st.data())
def test_shard_ids_are_unique_padded_and_sort_in_task_order(count: int, data) -> None:
    """`<run>-s0000`: at least four digits, wide enough for the largest index, so lexical order is
    task order and the index reads back from the suffix."""
    picked = sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=1, max_size=20)))
    ids = [shard_id("run-1", i, count) for i in picked]
    assert ids == sorted(ids)
    assert picked == [int(i.rsplit("-s", 1)[1]) for i in ids]
    assert {max(4, len(str(count - 1)))} == {len(i.rsplit("-s", 1)[1]) for i in ids}


@given(st.integers(0, 99_999), st.integers(4, 6))
def test_log_pattern_task_padding_matches_the_shard_dir(task: int, width: int) -> None:
    """Slurm's `%4a` (as the fake expands it) zero-pads the task id like shard ids do, so task i's
    batch log lands in shard i's own logs dir."""
    count = 10 ** (width - 1) + 1 if width > 4 else 1000
    if task >= count:
        task = count - 1
    name = shard_id("r", task, count)
    pattern = f"/ws/attempts/r-s%{len(name.rsplit('-s', 1)[1])}a/logs/batch-%A_%a.out"
    assert f"/ws/attempts/{name}/logs/batch-77_{task}.out" == output_path(pattern, "80", "77", task)


def test_stage_run_layout_and_script(tmp_path) -> None:
    """One run dir and N shard dirs; each shard shares the run's plan (digest-checked, read-only),
    records its index; the script has one --array directive and no shell logic at all."""
    staged = stage_run(parse_plan(json.dumps(sharded(3, 2))), tmp_path / "ws", FakeClock())
    assert [d.name for d in staged.shard_dirs] == read_run(staged.run_dir)["shards"]
    assert [(i, 3) for i in range(3)] == [shard_of(read_record(d), {}) for d in staged.shard_dirs]
    assert {os.stat(staged.run_dir / "plan.json").st_ino} == {os.stat(d / "plan.json").st_ino for d in staged.shard_dirs}
    script = staged.script.read_text()
    directives = dict(read_directives(script))
    assert "0-2%2" == directives["--array"]
    body = [line for line in script.splitlines() if not line.startswith("#")]
    assert 1 == len(body) and body[0].startswith("exec ") and "$" not in script
    assert f" run {staged.run_dir} " in body[0]


def _tampered(record: dict) -> list[tuple[str, dict]]:
    return [("run_id", {**record, "run_id": "other"}),
            ("shards", {**record, "shards": record["shards"][:1] + ["../../elsewhere"] + record["shards"][2:]}),
            ("num_shards", {**record, "num_shards": 2}),
            ("job_id", {**record, "job_id": "12; rm"})]


@pytest.mark.parametrize("field", ["run_id", "shards", "num_shards", "job_id"])
def test_a_tampered_run_record_is_refused(tmp_path, field: str) -> None:
    """The run record is read back validated: shard ids must be exactly this run's, so a task can
    only ever reach its own shard."""
    staged = stage_run(parse_plan(json.dumps(sharded(3))), tmp_path / "ws", FakeClock())
    path = staged.run_dir / RUN_RECORD
    bad = dict(_tampered(json.loads(path.read_text())))[field]
    path.write_text(json.dumps(bad))
    with pytest.raises(AttemptDirError):
        select_shard(staged.run_dir, {"SLURM_ARRAY_TASK_ID": "1"})


def test_select_shard_picks_the_tasks_own_shard(tmp_path) -> None:
    """SLURM_ARRAY_TASK_ID=i selects shard i; a plain attempt dir is itself."""
    staged = stage_run(parse_plan(json.dumps(sharded(4))), tmp_path / "ws", FakeClock())
    picked = [select_shard(staged.run_dir, {"SLURM_ARRAY_TASK_ID": str(i)}) for i in range(4)]
    assert list(staged.shard_dirs) == picked
    assert staged.shard_dirs[0] == select_shard(staged.shard_dirs[0], {})


@pytest.mark.parametrize(("env", "message"), [
    ({}, "SLURM_ARRAY_TASK_ID=''"),
    ({"SLURM_ARRAY_TASK_ID": "4"}, "names no shard"),
    ({"SLURM_ARRAY_TASK_ID": "-1"}, "names no shard"),
    ({"SLURM_ARRAY_TASK_ID": "1 "}, "names no shard"),
])
def test_select_shard_refuses_a_task_id_that_names_no_shard(tmp_path, env: dict, message: str) -> None:
    """Outside an array, or with a task id the run does not have, `run <run dir>` refuses."""
    staged = stage_run(parse_plan(json.dumps(sharded(4))), tmp_path / "ws", FakeClock())
    with pytest.raises(AttemptDirError, match=message):
        select_shard(staged.run_dir, env)


def test_a_shard_record_disagreeing_with_the_task_is_refused(tmp_path) -> None:
    """A shard whose record names another index (moved or edited) is not run by task i."""
    staged = stage_run(parse_plan(json.dumps(sharded(2))), tmp_path / "ws", FakeClock())
    record_path = staged.shard_dirs[1] / "attempt.json"
    record = json.loads(record_path.read_text())
    record["shard"]["index"] = 0
    record_path.write_text(json.dumps(record))
    with pytest.raises(AttemptDirError, match="not shard 1"):
        select_shard(staged.run_dir, {"SLURM_ARRAY_TASK_ID": "1"})
    with pytest.raises(AttemptDirError, match="array task 1"):
        shard_of(record, {"SLURM_ARRAY_TASK_ID": "1"})
