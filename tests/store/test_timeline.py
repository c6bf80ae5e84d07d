"""Where the time went: phases from an attempt's own records, as a table and a Mermaid gantt."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.store.attempt_files import TIMELINE
from dd_slurm.store.timeline import build, load, markdown, mermaid, table, write_timeline
from tests.conftest import FIXTURES

CASES = sorted(p.name for p in (FIXTURES / "timeline").iterdir())


@pytest.mark.parametrize("case", CASES)
def test_table_and_gantt_match_the_reviewed_fixtures(case: str) -> None:
    """fixtures/timeline/<case>/ holds an attempt's records and the reviewed table and chart."""
    found = load(FIXTURES / "timeline" / case)
    expected_table = (FIXTURES / "timeline" / case / "expected.txt").read_text()
    expected_chart = (FIXTURES / "timeline" / case / "expected.mmd").read_text()
    assert (expected_table, expected_chart) == (table(found) + "\n", mermaid(found))


def test_the_phases_of_a_readiness_timeout() -> None:
    """Queue wait is submit to job start; verification runs from the job start until the machine
    leaves `verified`; a deployment never ready loads until `deploying` ends; with no client, the
    GPU time runs to the end of the attempt."""
    found = load(FIXTURES / "timeline" / "readiness-timeout")
    rows = {r.name: (round(r.seconds, 2), r.note) for r in found.rows}
    assert {"queue wait": (95.0, "submit to start"), "verification": (2.6, ""), "preflight": (6.4, ""),
            "deploying": (60.5, ""), "big-0 load": (60.3, "never ready"), "small-0 load": (5.95, "launch to ready"),
            "cleanup": (6.5, "")} == rows
    assert (24, 24 * 76.0, False) == (found.gpus, round(found.gpu_seconds_before_client, 6), found.client_started)


def test_a_deployment_launched_held_beside_the_preflight_loads_from_its_release() -> None:
    """Its step was launched at 2.1 s, while the preflight ran; it was released on entering
    `deploying` at 5 s and ready at 8 s: its load is the 3 s from the release, not 5.9 s."""
    entries = [{"kind": "transition", "from": a, "to": b, "ts": ts}
               for a, b, ts in [("staged", "verified", 1.0), ("verified", "preflight", 2.0),
                                ("preflight", "deploying", 5.0), ("deploying", "ready", 9.0)]]
    found = build("a", {}, entries, {"deployments": {"small-0": {"ready_at": 8.0}}},
                  {"processes": [{"name": "deploy-small-0", "started_at": 2.1}]}, {"started_at": 0.5}, {})
    assert [(5.0, 3.0, "launch to ready")] == [(r.start, r.seconds, r.note) for r in found.rows
                                               if r.name == "small-0 load"]


def test_every_replica_loads_from_its_own_steps() -> None:
    """Readiness is keyed by replica (`small-0`, `big-0`) and a replica's steps are its leader
    `deploy-<replica>` and its followers `deploy-<replica>-<rank>`: a single-node replica, each of
    a replicated deployment's, and a two-node one each get a row from their own steps' first start
    (here each step starts at a different time, so a step counted for the wrong replica shows)."""
    entries = [{"kind": "transition", "from": a, "to": b, "ts": ts}
               for a, b, ts in [("staged", "verified", 1.0), ("verified", "preflight", 2.0),
                                ("preflight", "deploying", 3.0), ("deploying", "ready", 20.0)]]
    readiness = {"deployments": {"small-0": {"ready_at": 10.0, "nodes": ["n1"]},
                                 "small-1": {"ready_at": 11.0, "nodes": ["n2"]},
                                 "big-0": {"ready_at": 12.0, "nodes": ["n2", "n3"]}}}
    starts = {"deploy-small-0": 5.0, "deploy-small-1": 6.0, "deploy-big-0-1": 4.0, "deploy-big-0": 7.0,
              "deploy-small-1-1": 3.5}  # no such step of small-1 (one node): not counted
    found = build("a", {}, entries, readiness, {"processes": [{"name": n, "started_at": t} for n, t in starts.items()]},
                  {"started_at": 0.5}, {})
    assert {"small-0 load": (5.0, 10.0), "small-1 load": (6.0, 11.0), "big-0 load": (4.0, 12.0)} == {
        r.name: (r.start, r.end) for r in found.rows if r.section == "deployments"}


def test_each_lost_replica_has_a_row_until_it_serves_again() -> None:
    """A replica lost at 30 s and serving again after its restart at 36 s has a 6 s row naming the
    cause and the restart; one lost at 40 s that never came back runs to cleanup (50 s)."""
    moves = [("staged", "verified", 1.0), ("verified", "preflight", 2.0), ("preflight", "deploying", 3.0),
             ("deploying", "ready", 9.0), ("ready", "client", 10.0), ("client", "cleanup", 50.0)]
    entries = [{"kind": "transition", "from": a, "to": b, "ts": ts} for a, b, ts in moves] + [
        {"kind": "event", "trigger": "lose_replica", "replica": "small-1", "reason": "server_crashed", "ts": 30.0},
        {"kind": "event", "trigger": "restart_replica", "replica": "small-1", "restart": 1, "ts": 36.0},
        {"kind": "event", "trigger": "lose_replica", "replica": "small-2", "reason": "server_stalled", "ts": 40.0}]
    found = build("a", {}, entries, {}, {}, {"started_at": 0.5}, {})
    assert [("small-1 lost", 30.0, 6.0, "server_crashed; serving again after restart 1"),
            ("small-2 lost", 40.0, 10.0, "server_stalled; not back")] == [
        (r.name, r.start, r.seconds, r.note) for r in found.rows if r.name.endswith(" lost")]


def test_each_nodes_weights_staging_has_a_row_ending_when_the_node_said() -> None:
    """A node that copied 2 GB in 2 s (ending at 5 s, journaled later at 6 s) and one that reused its
    copy: one row each, with the bytes and the rate or the reuse."""
    entries = [{"kind": "transition", "from": "verified", "to": "preflight", "ts": 2.0},
               {"kind": "event", "trigger": "weights_staged", "node": "n1", "bytes": 2_000_000_000, "seconds": 2.0,
                "reused": False, "ended_at": 5.0, "ts": 6.0},
               {"kind": "event", "trigger": "weights_staged", "node": "n2", "bytes": 2_000_000_000, "seconds": 0.01,
                "reused": True, "ended_at": 3.01, "ts": 6.0}]
    found = build("a", {}, entries, {}, {}, {"started_at": 0.5}, {})
    assert [("weights on n1", 3.0, 2.0, "2,000.0 MB copied, 1,000 MB/s"),
            ("weights on n2", 3.0, 0.01, "2,000.0 MB reused an earlier copy")] == [
        (r.name, round(r.start, 3), round(r.seconds, 3), r.note) for r in found.rows if r.name.startswith("weights")]


def test_gpu_time_stops_when_the_client_starts() -> None:
    """The demo: 3 nodes x 2 GPUs, from the job's start to the client's start."""
    found = load(FIXTURES / "timeline" / "demo-succeeded")
    journal = [json.loads(line) for line in (FIXTURES / "timeline" / "demo-succeeded" / "journal.jsonl").open()]
    client_at = next(e["ts"] for e in journal if e["to"] == "client")
    started = json.loads((FIXTURES / "timeline" / "demo-succeeded" / "supervisor.json").read_text())["started_at"]
    assert (6, True) == (found.gpus, found.client_started)
    assert pytest.approx(6 * (client_at - started)) == found.gpu_seconds_before_client


JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)
ENTRY = st.fixed_dictionaries({"kind": st.just("transition"), "from": st.sampled_from(["staged", "verified", "client"]),
                               "to": st.sampled_from(["verified", "client", "cleanup", "done"]),
                               "ts": st.floats(min_value=0, max_value=2e9)})


@settings(max_examples=60)
@given(JSONISH, st.lists(ENTRY | JSONISH, max_size=6), JSONISH, JSONISH, JSONISH, JSONISH)
def test_any_records_give_a_timeline_and_never_raise(record, entries, readiness, processes, supervisor, plan) -> None:
    """Records read back from disk are not trusted: whatever they hold, the renderers produce text."""
    found = build("a", record, entries, readiness, processes, supervisor, plan)
    assert table(found).startswith("where the time went: a") and mermaid(found).startswith("gantt\n")
    assert "nan" not in table(found) and "inf" not in table(found)


def test_write_timeline_writes_markdown_and_never_raises(tmp_path) -> None:
    """The supervisor's hook: timeline.md with the table and the gantt; an unwritable dir is None."""
    attempt = tmp_path / "demo-succeeded"
    shutil.copytree(FIXTURES / "timeline" / "demo-succeeded", attempt)
    path = write_timeline(attempt)
    assert (attempt / TIMELINE, markdown(load(attempt))) == (path, path.read_text())
    assert "```mermaid\ngantt\n" in path.read_text()
    assert write_timeline(tmp_path / "missing") is None


def test_inspect_timeline_cli(dd_slurm_exe) -> None:
    """`inspect --timeline` prints the table, `--mermaid` the gantt, `--json` the rows; `--mermaid`
    alone and `--chart --json` are usage errors (exit 2, one line)."""
    import subprocess

    case = str(FIXTURES / "timeline" / "readiness-timeout")

    def cli(*args):
        return subprocess.run(dd_slurm_exe + ["inspect", *args, case], capture_output=True, text=True, timeout=30)

    assert (FIXTURES / "timeline" / "readiness-timeout" / "expected.txt").read_text() == cli("--timeline").stdout
    assert (FIXTURES / "timeline" / "readiness-timeout" / "expected.mmd").read_text() == \
        cli("--timeline", "--mermaid").stdout
    assert 7 == len(json.loads(cli("--timeline", "--json").stdout)["rows"])
    for bad in (("--mermaid",), ("--chart", "--json")):
        out = cli(*bad)
        assert (2, 1) == (out.returncode, len(out.stderr.splitlines())), out.stderr
