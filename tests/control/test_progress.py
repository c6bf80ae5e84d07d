"""`status`'s progress while the client runs: the gateway's live counts and the records so far."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.control.progress import progress, progress_line
from tests.control.test_submit_status import journal_to, staged


def stats(requests: int, ok: int, full: int, window: dict | None) -> dict:
    alias = {"requests": requests, "responses": {"2xx": ok, "5xx": requests - ok - full, "4xx": full}, "errors": {},
             "peak_queue": 0, "latency": {"count": ok, "p50_ms": 1.0, "p99_ms": 2.0},
             "rejected_429": {"queue_full": full, "queue_timeout": 0},
             "replicas": [{"deployment": "d", "replica": k, "max_inflight": 4, "inflight": 0, "requests": 0,
                           "responses": {}, "errors": {}, "peak_inflight": 0,
                           "latency": {"count": 0, "p50_ms": None, "p99_ms": None}} for k in range(2)]}
    return {"schema": 1, "started_at": 0.0, "written_at": 1.0, "aliases": {"m": alias},
            **({"window": window} if window else {})}


def test_progress_counts_the_gateway_and_the_complete_records(tmp_path) -> None:
    """Requests, 2xx, 429s and 5xx summed over aliases; the last minute's rate; complete JSON
    lines of the result (a line being written is not yet a record); no ETA once the target is
    reached."""
    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight", "deploying", "ready", "client")
    started = json.loads((attempt / "journal.jsonl").read_text().splitlines()[-1])["ts"]
    (attempt / "gateway-stats.json").write_text(json.dumps(stats(100, 90, 4, {"seconds": 50.0, "requests": 25, "ok": 25})))
    (attempt / "results").mkdir(exist_ok=True)
    (attempt / "results" / "records.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n{"a": ')
    found = progress(attempt, started + 30.0)
    assert {"requests": 100, "ok": 90, "rejected_429": 4, "errors": 6, "req_per_s": 0.5, "replicas_serving": 2,
            "tokens_out": None, "tokens_per_s": None, "records": 3, "records_target": 3, "eta_s": None} == found


def test_tokens_come_from_the_replicas_own_counters(tmp_path) -> None:
    """Two replicas whose /metrics counted 600 and 400 generated tokens, 500 of them in the last
    50 s: tokens_out 1000, tokens_per_s 10; the line shows the rate."""
    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight", "deploying", "ready", "client")
    doc = stats(100, 90, 4, {"seconds": 50.0, "requests": 25, "ok": 25, "generation_tokens": 500.0})
    for replica, tokens in zip(doc["aliases"]["m"]["replicas"], (600.0, 400.0)):
        replica["server"] = {"prompt_tokens": 10.0, "generation_tokens": tokens, "running": 1.0, "waiting": 0.0,
                             "at": 1.0}
    (attempt / "gateway-stats.json").write_text(json.dumps(doc))
    found = progress(attempt, 100.0)
    assert (1000, 10.0, "25 req/s  10 tok/s  429s 4%") == (found["tokens_out"], found["tokens_per_s"], progress_line(
        {**found, "req_per_s": 25.0, "records": None}))


def test_before_the_gateway_wrote_anything_progress_is_unknown_not_zero(tmp_path) -> None:
    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight", "deploying", "ready", "client")
    found = progress(attempt, 0.0)
    assert (None, None, None) == (found["requests"], found["req_per_s"], found["records"])


@pytest.mark.parametrize(("found", "line"), [
    ({"records": 1240, "records_target": 10000, "req_per_s": 31.2, "requests": 1000, "rejected_429": 20,
      "eta_s": 2830.0}, "1,240/10,000 records  31 req/s  429s 2%  ETA 0:47:10"),
    ({"records": 7, "records_target": None, "req_per_s": None, "requests": 9, "rejected_429": 0, "eta_s": None},
     "7 records"),
    ({"records": None, "records_target": None, "req_per_s": None, "requests": None, "eta_s": None}, ""),
])
def test_the_progress_line_says_what_is_known(found: dict, line: str) -> None:
    """One compact line for `--watch` (it fits 80 columns beside the state), without unknowns."""
    assert line == progress_line(found)


def test_the_eta_comes_from_the_records_rate_since_the_client_started(tmp_path) -> None:
    """3 records in 30 s toward 10: 7 more at 0.1/s is 70 s."""
    attempt = staged(tmp_path, "1000")
    plan = json.loads((attempt / "plan.json").read_text())
    plan["client"]["result"]["min_records"] = 10
    (attempt / "plan.json").chmod(0o600)
    (attempt / "plan.json").write_text(json.dumps(plan))
    journal_to(attempt, "verified", "preflight", "deploying", "ready", "client")
    started = json.loads((attempt / "journal.jsonl").read_text().splitlines()[-1])["ts"]
    (attempt / "results").mkdir(exist_ok=True)
    (attempt / "results" / "records.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    assert (3, 10, 70.0) == tuple(progress(attempt, started + 30.0)[k] for k in ("records", "records_target", "eta_s"))


def test_records_so_far_skip_blank_lines_and_never_read_a_fifo(tmp_path) -> None:
    """Blank lines are not records (the result check skips them too); a FIFO where the result
    should be is not opened (a reader would block): unknown."""
    import os

    from dd_slurm.control.progress import complete_lines

    (tmp_path / "r.jsonl").write_bytes(b'{"a": 1}\n\n{"a": 2}\n   \n{"a": 3')
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert (2, None) == (complete_lines(tmp_path / "r.jsonl"), complete_lines(tmp_path / "fifo.jsonl"))


@settings(max_examples=300, deadline=None)
@given(content=st.lists(st.sampled_from([b'{"a": 1}', b"", b" ", b"\t\r", b"\x0b", b"\x0c x", b"{}", b"\n"]),
                        max_size=30).map(b"\n".join), last=st.sampled_from([b"", b"\n", b'{"b"']),
       block=st.integers(1, 9))
def test_records_so_far_match_the_line_by_line_count(tmp_path_factory, content, last, block) -> None:
    """Whatever the blank lines and however the file is cut into blocks, the fast count equals
    counting newline-terminated lines that are not blank, one by one."""
    from dd_slurm.control.progress import complete_lines

    path = tmp_path_factory.mktemp("lines") / "r.jsonl"
    path.write_bytes(content + last)
    expected = sum(1 for line in (content + last).split(b"\n")[:-1] if line.strip())
    assert expected == complete_lines(path, block)


def test_status_and_watch_show_the_nodes_still_staging_weights(fake_slurm, fake_commands, clock, tmp_path) -> None:
    """While the preflight runs, status names the nodes the staging step copies on and those that
    reported (journal `weights_staged`); the watch line says which still copy."""
    from dd_slurm.control import status as attempt_status
    from dd_slurm.control.watch import progress as watch_line
    from dd_slurm.machine.journal import Journal
    from dd_slurm.store import attempt_files as files
    from tests.control.test_submit_status import fake_job

    attempt = staged(tmp_path, "1000")
    journal_to(attempt, "verified", "preflight")
    files.stage_request(attempt).parent.mkdir(exist_ok=True)
    files.stage_request(attempt).write_text(json.dumps({"nodes": {"n1": [], "n2": []}}))
    fake_job(fake_slurm, "1000", state="RUNNING")
    before = attempt_status.status(attempt, fake_commands, clock)
    Journal(attempt, clock).append("event", "preflight", "preflight", "weights_staged", node="n1")
    after = attempt_status.status(attempt, fake_commands, clock)
    assert ({"nodes": ["n1", "n2"], "staged": []}, {"nodes": ["n1", "n2"], "staged": ["n1"]}) == (
        before["staging"], after["staging"])
    assert ("weights: staging on n1,n2", "weights: staging on n2") == tuple(
        part for view in (before, after) for part in watch_line(view, 0.0)[1].split("  ") if part.startswith("weights"))
