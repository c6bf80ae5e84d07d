"""readiness.json is one typed record: the writer's every write reads back validated and
unchanged, and refused content names the file and the field path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.store.readiness import MOVES, Readiness, ReadinessRecord, read_record, readiness_json
from tests.store.records_table import invalid_cases, refusal

names = st.text("abcdefghij-0123456789", min_size=1, max_size=12)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
probes = st.none() | st.fixed_dictionaries({"ok": st.booleans(), "time": st.floats(0, 2e9), "error": st.none() | texts})
replicas = st.fixed_dictionaries({
    "deployment": names, "replica": st.integers(0, 64), "nodes": st.lists(names, max_size=3),
    "model_alias": names, "port": st.none() | st.integers(1, 65535), "base_url": st.none() | names})


@settings(max_examples=40, deadline=None)
@given(entries=st.dictionaries(names, replicas, min_size=1, max_size=4), moves=st.lists(st.tuples(
    st.sampled_from(["starting", "ready", "failed", "stopped"]), st.none() | texts, probes), max_size=6))
def test_every_write_reads_back_the_same(tmp_path_factory, entries, moves) -> None:
    """Whatever legal moves, details and probes the writer records, the file reads back as the
    record it holds in memory, and a reader's record is the same dict once more in JSON form."""
    readiness = Readiness.new(tmp_path_factory.mktemp("r"), "a-1", entries)
    name = sorted(entries)[0]
    for state, detail, probe in moves:
        if state in MOVES[readiness.state(name)]:
            readiness.move(name, state, detail=detail)
        if probe is not None:
            readiness.note_probe(name, probe)
    back = read_record(readiness.path)
    assert (True, readiness.record) == (isinstance(back, ReadinessRecord), readiness_json(back))


@pytest.mark.parametrize(("content", "expected"), invalid_cases("readiness"))
def test_invalid_content_names_the_file_and_field(tmp_path, content: str, expected: str) -> None:
    """Each refused content gives its one-line error: the file, then the field path."""
    path = tmp_path / "readiness.json"
    assert f"{path}: {expected}" == refusal(path, content, read_record)
