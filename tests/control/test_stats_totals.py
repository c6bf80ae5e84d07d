"""status's light reader of gateway-stats.json (control/stats_totals.py) against the full record
(store/gateway_stats): the same totals for any record the gateway may write, and a clear error for
a file whose used fields are not what the record allows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.control.stats_totals import SCHEMA, gateway_totals
from dd_slurm.errors import AttemptDirError
from dd_slurm.store import gateway_stats
from dd_slurm.store.gateway_stats import read_stats

COUNTS = st.integers(0, 10**12)
NUMBERS = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)


def replica(k: int, server) -> dict:
    doc = {"deployment": "d", "replica": k, "max_inflight": 4, "inflight": 0, "requests": 0, "responses": {},
           "errors": {}, "peak_inflight": 0, "latency": {"count": 0, "p50_ms": None, "p99_ms": None}}
    return {**doc, **({"server": server} if server is not None else {})}


SERVERS = st.one_of(st.none(), st.builds(lambda p, g, r, w: {"prompt_tokens": p, "generation_tokens": g, "running": r,
                                                                  "waiting": w, "at": 1.0}, NUMBERS, NUMBERS, NUMBERS, NUMBERS))
ALIASES = st.builds(
    lambda requests, ok, five, full, late, servers: {
        "requests": requests, "responses": {"2xx": ok, "5xx": five}, "errors": {}, "peak_queue": 0,
        "latency": {"count": ok, "p50_ms": 1.0, "p99_ms": 2.0}, "rejected_429": {"queue_full": full, "queue_timeout": late},
        "replicas": [replica(k, s) for k, s in enumerate(servers)]},
    COUNTS, COUNTS, COUNTS, COUNTS, COUNTS, st.lists(SERVERS, max_size=3))
WINDOWS = st.one_of(st.none(), st.builds(lambda s, r, o, g: {"seconds": s, "requests": r, "ok": o,
                                                             **({"generation_tokens": g} if g is not None else {})},
                                         NUMBERS, COUNTS, COUNTS, st.one_of(st.none(), NUMBERS)))
DOCUMENTS = st.builds(lambda aliases, window: {"schema": 1, "started_at": 0.0, "written_at": 1.0, "aliases": aliases,
                                               **({"window": window} if window is not None else {})},
                      st.dictionaries(st.sampled_from(["a", "b", "c"]), ALIASES, max_size=3), WINDOWS)


def from_the_record(path) -> dict:
    """The totals as computed from the whole structured record (what status used before)."""
    stats = read_stats(path)
    aliases, window = list(stats.aliases.values()), stats.window
    servers = [r.server for a in aliases for r in a.replicas if r.server is not None]
    tokens = round(sum(s.generation_tokens for s in servers)) if servers else None
    return {"tokens_out": tokens,
            "tokens_per_s": round(window.generation_tokens / window.seconds, 3)
            if tokens is not None and window and window.generation_tokens is not None and window.seconds > 0 else None,
            "requests": sum(a.requests for a in aliases), "ok": sum(a.responses.get("2xx", 0) for a in aliases),
            "rejected_429": sum(a.rejected_429.queue_full + a.rejected_429.queue_timeout for a in aliases),
            "errors": sum(a.responses.get("5xx", 0) for a in aliases),
            "req_per_s": round(window.requests / window.seconds, 3) if window and window.seconds > 0 else None,
            "replicas_serving": sum(len(a.replicas) for a in aliases)}


@settings(max_examples=200, deadline=None)
@given(document=DOCUMENTS)
def test_the_light_totals_equal_the_full_records(tmp_path_factory, document) -> None:
    """For any record the converter accepts, the field-by-field totals are the record's totals."""
    path = tmp_path_factory.mktemp("stats") / "gateway-stats.json"
    path.write_text(json.dumps(document))
    assert from_the_record(path) == gateway_totals(path)


@pytest.mark.parametrize(("where", "value", "record_refuses"), [
    (("schema",), 2, True), (("schema",), True, True), (("aliases",), [], True), (("aliases", "m", "requests"), -1, False),
    (("aliases", "m", "requests"), True, True), (("aliases", "m", "responses", "2xx"), 1.5, True),
    (("aliases", "m", "rejected_429", "queue_full"), "3", True), (("aliases", "m", "replicas"), {}, True),
    (("window", "seconds"), "NaN", True), (("window", "requests"), None, True),
])
def test_a_used_field_of_the_wrong_shape_is_an_error_naming_the_file(tmp_path, where, value, record_refuses) -> None:
    """A count that is negative, a boolean or a float, a schema not 1, a list for a mapping: one
    AttemptDirError naming the file, as the full record's reader gives (a negative count, which
    the record's types allow, is refused here only)."""
    document = {"schema": 1, "started_at": 0.0, "written_at": 1.0, "window": {"seconds": 5.0, "requests": 1, "ok": 1},
                "aliases": {"m": {"requests": 1, "responses": {"2xx": 1}, "errors": {}, "peak_queue": 0,
                                  "latency": {"count": 1, "p50_ms": 1.0, "p99_ms": 1.0},
                                  "rejected_429": {"queue_full": 0, "queue_timeout": 0}, "replicas": []}}}
    target = document
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    path = tmp_path / "gateway-stats.json"
    path.write_text(json.dumps(document))
    with pytest.raises(AttemptDirError) as light:
        gateway_totals(path)
    if record_refuses:
        with pytest.raises(AttemptDirError):
            read_stats(path)
    assert str(path) in str(light.value)


def test_the_schema_is_the_records() -> None:
    assert gateway_stats.SCHEMA == SCHEMA
