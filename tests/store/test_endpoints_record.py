"""endpoints.json is one typed record: written by the one writer, read back validated (field
paths in every error), unchanged by the round trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.store.endpoints import STATES, Endpoints, ModelEndpoint, ReplicaEndpoint, read_endpoints, write_endpoints
from dd_slurm.store.view import read_endpoints_json
from tests.store.records_table import invalid_cases, refusal

texts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)
replicas = st.builds(ReplicaEndpoint, deployment=texts, replica=st.integers(0, 64),
                     base_url=st.none() | texts)
models = st.builds(ModelEndpoint, url=st.none() | texts, replicas=st.lists(replicas, max_size=3).map(tuple))
endpoints = st.builds(Endpoints, schema=st.just(2), state=st.sampled_from(STATES),
                      models=st.dictionaries(texts, models, max_size=3))


@settings(max_examples=60, deadline=None)
@given(record=endpoints)
def test_what_is_written_reads_back_the_same(tmp_path_factory, record: Endpoints) -> None:
    """Any endpoints record survives write then read unchanged, and the file is the JSON form."""
    path = tmp_path_factory.mktemp("e") / "endpoints.json"
    write_endpoints(path, record)
    assert (record, json.loads(path.read_text())) == (read_endpoints(path), read_endpoints_json(path))


def test_no_file_is_no_endpoints(tmp_path) -> None:
    """Before anything is published there is no record, not an error."""
    assert None is read_endpoints(tmp_path / "endpoints.json")


@pytest.mark.parametrize(("content", "expected"), invalid_cases("endpoints"))
def test_invalid_content_names_the_file_and_field(tmp_path, content: str, expected: str) -> None:
    """Each refused content gives its one-line error: the file, then the field path."""
    path = tmp_path / "endpoints.json"
    assert f"{path}: {expected}" == refusal(path, content, read_endpoints)
