"""attempt.json is one typed record: staged, updated and read back through the one converter
(field paths in every error), unchanged by the round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.errors import AttemptDirError
from dd_slurm.store.attempt_files import RECORD
from dd_slurm.store.attempt_record import add_observation, new_record, read_record, settled, update_record
from tests.store.records_table import invalid_cases

STAGED = {"attempt_id": "a1", "plan_digest": "p", "bundle_digest": "b", "bundle_dir": "/w/bundles/b",
          "job_name": "dd-a1", "staged_at": 1.5, "reconcile_deadline_s": 300.0}
job_ids = st.integers(1, 10**9).map(str) | st.tuples(st.integers(1, 10**9), st.integers(0, 9999)).map(
    lambda t: f"{t[0]}_{t[1]}")
observations = st.fixed_dictionaries({
    "job_id": job_ids, "state": st.sampled_from(["pending", "running", "completed", "lost"]),
    "terminal": st.booleans(), "exit_code": st.none() | st.integers(0, 255), "signal": st.none() | st.integers(1, 64),
    "raw_state": st.none() | st.text(max_size=20), "source": st.sampled_from(["squeue", "sacct", "none"]),
    "reason": st.none() | st.text(max_size=20)})


@settings(max_examples=40, deadline=None)
@given(job_id=job_ids, seen=st.lists(st.tuples(st.floats(1, 2e9), observations), max_size=5),
       cancels=st.lists(st.fixed_dictionaries({"time": st.floats(0, 2e9)}, optional={"via": st.just("run")}),
                        max_size=3), error=st.none() | st.text(max_size=30))
def test_what_is_staged_and_updated_reads_back_the_same(tmp_path_factory, job_id, seen, cancels, error) -> None:
    """A staged attempt, updated with a job id, observations, cancel requests and a submit error
    (any text: it quotes sbatch), reads back exactly as the last writer left it."""
    attempt = tmp_path_factory.mktemp("attempt")
    (attempt / RECORD).write_bytes(new_record(**STAGED))
    with update_record(attempt) as record:
        record.update(job_id=job_id, submitted_at=1.0, submit_error=error)
        for now, observation in seen:
            add_observation(record, now, observation)
        record["cancel_requests"].extend(cancels)
        expected = json.loads(json.dumps(record))
    assert expected == read_record(attempt)


def test_a_record_read_back_has_every_field() -> None:
    """What staging writes holds every field of the record (absent ones null or empty), so a
    reader never meets a missing key."""
    assert {**dict.fromkeys(("job_id", "submitted_at", "last_seen", "shard", "array_job_id", "submit_started_at",
                             "submit_error", "submission", "cluster")), "observations": [], "cancel_requests": [],
            **STAGED} == json.loads(new_record(**STAGED))


def test_staging_a_wrong_field_raises() -> None:
    """new_record structures what it writes: a staging bug cannot land a record readers refuse."""
    with pytest.raises(AttemptDirError, match=r"attempt.json: not an attempt record \(staged_at: must be a finite"):
        new_record(**{**STAGED, "staged_at": "now"})


def test_an_update_that_breaks_the_record_writes_nothing(tmp_path) -> None:
    """A writer that puts a wrong value in the record raises, and the file keeps its last good bytes."""
    (tmp_path / RECORD).write_bytes(new_record(**STAGED))
    before = (tmp_path / RECORD).read_bytes()
    with pytest.raises(AttemptDirError, match=r"\(job_id: '--all' is not a Slurm job id\)"):
        with update_record(tmp_path) as record:
            record["job_id"] = "--all"
    assert before == (tmp_path / RECORD).read_bytes()


def test_settled_is_the_last_terminal_sacct_answer(tmp_path) -> None:
    """settled() returns the persisted terminal sacct observation (without its time), read back
    through the converter; a terminal squeue answer is not final."""
    (tmp_path / RECORD).write_bytes(new_record(**STAGED))
    final = {"job_id": "7", "state": "completed", "terminal": True, "exit_code": 0, "signal": None,
             "raw_state": "COMPLETED", "source": "sacct", "reason": None}
    with update_record(tmp_path) as record:
        add_observation(record, 2.0, {**final, "source": "squeue"})
    assert settled(read_record(tmp_path)) is None
    with update_record(tmp_path) as record:
        add_observation(record, 3.0, final)
    assert final == settled(read_record(tmp_path))


@pytest.mark.parametrize(("content", "expected"), invalid_cases("attempt"))
def test_invalid_content_names_the_file_and_field(tmp_path, content: str, expected: str) -> None:
    """Each refused content gives its one-line error: the file, then the field path and why."""
    (tmp_path / RECORD).write_text(content)
    with pytest.raises(AttemptDirError) as caught:
        read_record(tmp_path)
    assert f"{tmp_path / RECORD}: {expected}" == str(caught.value)
