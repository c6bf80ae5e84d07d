"""run.json is one typed record: staged and updated through the converter, read back validated
(field paths, then this run's shard ids), unchanged by the round trip."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.errors import AttemptDirError
from dd_slurm.store.attempt_files import RUN_RECORD
from dd_slurm.store.run_record import load_run, new_run, read_run, shard_id, update_run
from tests.store.records_table import invalid_cases

texts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)
times = st.floats(0, 2e9)


@settings(max_examples=40, deadline=None)
@given(count=st.integers(1, 12), job_id=st.none() | st.integers(1, 10**9).map(str), cancels=st.lists(
    st.fixed_dictionaries({"time": times}, optional={"via": st.just("run")}), max_size=3),
    error=st.none() | st.text(max_size=30))
def test_what_is_staged_and_updated_reads_back_the_same(tmp_path_factory, count, job_id, cancels, error) -> None:
    """A staged run, updated with any job id, cancel requests and submit error, reads back as written."""
    run_dir = tmp_path_factory.mktemp("runs") / "r1"
    run_dir.mkdir()
    (run_dir / RUN_RECORD).write_bytes(new_run(
        run_id="r1", num_shards=count, shards=[shard_id("r1", i, count) for i in range(count)], max_concurrent=None,
        plan_digest="p", bundle_digest="b", bundle_dir="/w/b", job_name="dd-r1", staged_at=1.0,
        reconcile_deadline_s=300.0))
    with update_run(run_dir) as record:
        record.update(job_id=job_id, submit_error=error)
        record["cancel_requests"].extend(cancels)
        expected = dict(record)
    assert (expected, count) == (read_run(run_dir), load_run(run_dir).num_shards)


def test_staging_a_wrong_field_raises() -> None:
    """new_run structures what it writes: a staging bug cannot land a record readers refuse."""
    with pytest.raises(AttemptDirError, match=r"run.json: not a run record \(num_shards: must be an integer\)"):
        new_run(run_id="r1", num_shards="2", shards=[], max_concurrent=None, plan_digest="p", bundle_digest="b",
                bundle_dir="/w/b", job_name="j", staged_at=1.0, reconcile_deadline_s=1.0)


@pytest.mark.parametrize(("content", "expected"), invalid_cases("run"))
def test_invalid_content_names_the_file_and_field(tmp_path, content: str, expected: str) -> None:
    """Each refused content gives its one-line error: the file, then the field path or the check."""
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    (run_dir / RUN_RECORD).write_text(content)
    with pytest.raises(AttemptDirError) as caught:
        read_run(run_dir)
    assert f"{run_dir / RUN_RECORD}: {expected}" == str(caught.value)
