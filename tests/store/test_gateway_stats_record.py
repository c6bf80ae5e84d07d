"""gateway-stats.json is one typed record: the gateway's document is structured before it lands,
reads back unchanged, and refused content names the file and the field path."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.store.gateway_stats import read_stats, stats_json, write_stats
from dd_slurm.store.view import read_gateway_stats_json
from tests.conftest import FIXTURES
from tests.store.records_table import invalid_cases, refusal

counts = st.integers(0, 10**9)
classes = st.dictionaries(st.sampled_from([f"{n}xx" for n in range(10)]), counts, max_size=3)
latency = st.fixed_dictionaries({"count": counts, "p50_ms": st.none() | st.floats(0, 1e6),
                                 "p99_ms": st.none() | st.floats(0, 1e6)})
common = {"requests": counts, "responses": classes, "errors": st.dictionaries(st.sampled_from(
    ["queue_full", "connect", "stall"]), counts, max_size=2), "latency": latency}
replica = st.fixed_dictionaries({**common, "deployment": st.text("abc", min_size=1), "replica": counts,
                                 "max_inflight": counts, "inflight": counts, "peak_inflight": counts},
                                optional={"base_url": st.just("http://n1:8000/v1")})
alias = st.fixed_dictionaries({**common, "peak_queue": counts, "replicas": st.lists(replica, max_size=3),
                               "rejected_429": st.fixed_dictionaries({"queue_full": counts, "queue_timeout": counts})})
document = st.fixed_dictionaries(
    {"schema": st.just(1), "started_at": st.floats(0, 2e9), "written_at": st.floats(0, 2e9),
     "aliases": st.dictionaries(st.text("xyz-", min_size=1, max_size=8), alias, max_size=3)},
    optional={"connections": st.fixed_dictionaries({k: counts for k in ("open", "refused_at_limit", "header_timeout",
                                                                        "idle_timeout", "refused_draining")}),
              "window": st.fixed_dictionaries({"seconds": st.floats(0, 120), "requests": counts, "ok": counts})})


@settings(max_examples=40, deadline=None)
@given(doc=document)
def test_what_the_gateway_writes_reads_back_the_same(tmp_path_factory, doc) -> None:
    """Any document of the gateway's shape is written as it is and reads back the same."""
    path = tmp_path_factory.mktemp("g") / "gateway-stats.json"
    write_stats(path, doc)
    assert (doc, doc, doc) == (json.loads(path.read_text()), stats_json(read_stats(path)), read_gateway_stats_json(path))


def test_the_fixture_document_is_valid() -> None:
    """The valid fixture the invalid table is derived from reads."""
    assert 1 == read_stats(FIXTURES / "records" / "gateway-stats-valid.json").schema


@pytest.mark.parametrize(("content", "expected"), invalid_cases("gateway-stats"))
def test_invalid_content_names_the_file_and_field(tmp_path, content: str, expected: str) -> None:
    """Each refused content gives its one-line error: the file, then the field path."""
    path = tmp_path / "gateway-stats.json"
    assert f"{path}: {expected}" == refusal(path, content, read_stats)
