"""`inspect` after a run: the failure and the log to open, the result, the endpoints' state, the
gateway's figures, and the path chart."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dd_slurm.control.report_inspect import endpoint_lines, failure_lines, gateway_lines, inspect_text, log_to_open
from dd_slurm.store.view import inspect_attempt
from tests.conftest import FIXTURES


def view_of(tmp_path, case: str) -> dict:
    attempt = tmp_path / case
    shutil.copytree(FIXTURES / "timeline" / case, attempt)
    return inspect_attempt(attempt)


def test_a_failure_names_its_detail_and_the_log_to_open(tmp_path) -> None:
    """A readiness timeout of `big`: the reason, the state it happened in, the detail, and the
    command that shows the deployment's log."""
    view = view_of(tmp_path, "readiness-timeout")
    assert ["failure: readiness_timeout in deploying: big-0 not healthy within 60s (last probe: connection refused);"
            " see logs/deploy-big-0.log",
            f"  log to open: dd-slurm logs {view['attempt']['dir']} deploy-big-0"] == failure_lines(view)


@pytest.mark.parametrize(("reason", "detail", "log"), [
    ("client_failed", "client exited 3; see logs/client.log", "client"),
    ("server_exited", "deploy-small-1 exited 1; see logs/deploy-small-1.log", "deploy-small-1"),
    ("preflight_failed", "", "preflight"),
    ("result_too_few_records", "records.jsonl has 1 records, needs 3", "client"),
    ("readiness_timeout", "big-2 not healthy within 60s", "deploy-big-2"),  # replica big-2's leader
    ("server_identity", "big-0: port 25390 on n1: nothing listens", "deploy-big-0"),
    ("bundle_checksum", "lib/x.py changed", "batch"),
    ("sigterm", "received SIGTERM", "batch"),
])
def test_the_log_to_open(reason: str, detail: str, log: str) -> None:
    """A log the detail names wins; else by reason; a deployment named first; else the batch log."""
    readiness = {"deployments": {"big-0": {}, "big-2": {}, "small-0": {}}}  # keyed by replica, as the runtime writes
    assert log == log_to_open(reason, detail, readiness)


def test_a_success_has_no_failure_and_shows_the_result(tmp_path) -> None:
    """The result's path, format, records and sha256 come from the result manifest."""
    attempt = tmp_path / "demo-succeeded"
    shutil.copytree(FIXTURES / "timeline" / "demo-succeeded", attempt)
    (attempt / "result-manifest.json").write_text(
        '{"bytes": 2382, "format": "jsonl", "path": "records.jsonl", "records": 12, "sha256": "b21d"}')
    text = inspect_text(inspect_attempt(attempt)).splitlines()
    assert not any(line.startswith("failure:") for line in text)
    assert [f"result: {attempt}/results/records.jsonl (jsonl, 12 records, 2382 bytes)", "  sha256 b21d"] == \
        text[text.index(next(line for line in text if line.startswith("result:"))):][:2]


@pytest.mark.parametrize(("endpoints_state", "readiness_state", "first"), [
    ("ready", "withdrawn", "endpoints: withdrawn (the aliases below were served)"),
    ("withdrawn", "withdrawn", "endpoints: withdrawn (the aliases below were served)"),
    ("ready", "published", "endpoints: ready (the aliases below are served)"),
])
def test_endpoints_after_cleanup_are_withdrawn_not_live(endpoints_state, readiness_state, first) -> None:
    """Once cleanup withdrew the endpoints, they are shown as withdrawn even if endpoints.json
    still says ready (schema 1 `base_urls` or schema 2 `url`)."""
    view = {"endpoints": {"state": endpoints_state, "models": {"m": {"url": "http://g:1/v1"},
                                                               "old": {"base_urls": ["http://n1:2/v1"]}}},
            "readiness": {"endpoints": readiness_state}, "history": [{"kind": "transition", "to": "ready"}]}
    assert [first, "  m: http://g:1/v1", "  old: http://n1:2/v1"] == endpoint_lines(view)


def test_endpoints_that_never_served_are_not_called_withdrawn() -> None:
    """An attempt that failed while deploying: its planned endpoints were withdrawn by cleanup but
    never served; inspect says so (it said `withdrawn (the aliases below were served)`)."""
    view = {"endpoints": {"state": "withdrawn", "models": {"m": {"url": None}}}, "readiness": {"endpoints": "withdrawn"},
            "history": [{"kind": "transition", "to": "deploying"}, {"kind": "transition", "to": "cleanup"}]}
    assert ["endpoints: never served (the attempt ended before its servers were ready)", "  m: ?"] == \
        endpoint_lines(view)


def test_the_gateways_figures_per_alias_and_replica() -> None:
    """gateway-stats.json as inspect shows it (was an empty `aliases:` line): connections, then per
    alias requests, answers by class, 429s by cause, errors and latency, then each replica's
    requests with its share of the alias's, its answers, latency and peak in flight."""
    from dd_slurm.store.converter import CONVERTER
    from dd_slurm.store.gateway_stats import GatewayStats, stats_json

    def replica(k: int, requests: int, latency: dict, errors: dict) -> dict:
        return {"deployment": "small", "replica": k, "max_inflight": 4, "inflight": 0, "requests": requests,
                "responses": {"2xx": requests} if requests else {}, "errors": errors, "peak_inflight": min(requests, 4),
                "latency": latency}

    quiet = {"count": 0, "p50_ms": None, "p99_ms": None}
    stats = stats_json(CONVERTER.structure({
        "schema": 1, "started_at": 1.0, "written_at": 2.0,
        "connections": {"open": 2, "refused_at_limit": 1, "header_timeout": 0, "idle_timeout": 3},
        "aliases": {"small-model": {
            "requests": 10, "responses": {"2xx": 8, "4xx": 2}, "errors": {"connect": 1}, "peak_queue": 5,
            "latency": {"count": 8, "p50_ms": 12.25, "p99_ms": 80.0},
            "rejected_429": {"queue_full": 2, "queue_timeout": 1},
            "replicas": [replica(0, 8, {"count": 8, "p50_ms": 12.25, "p99_ms": 80.0}, {}),
                         replica(1, 0, quiet, {"connect": 1})]}}}, GatewayStats))
    assert ["gateway: connections 2 open, 1 refused at the limit, 0 header and 3 idle timeouts",
            "  small-model: 10 requests, answers 2xx 8, 4xx 2, 429s 3 (queue full 2, waited too long 1), errors "
            "connect 1, p50 12.2 ms, p99 80.0 ms, peak queue 5",
            "    small-0: 8 requests (80%), answers 2xx 8, errors none, p50 12.2 ms, p99 80.0 ms, peak in flight 4/4",
            "    small-1: 0 requests (0%), answers none, errors connect 1, no latency yet, peak in flight 0/4"
            ] == gateway_lines(stats)
    assert [] == gateway_lines(None)


def test_chart_starts_on_staged_keeps_the_title_and_marks_where_it_ended(dd_slurm_exe) -> None:
    """`inspect --chart`: the start arrow points at `staged` whatever state the attempt is in;
    the title stays; the state it ended in is the active one."""
    out = subprocess.run(dd_slurm_exe + ["inspect", "--chart", str(FIXTURES / "timeline" / "readiness-timeout")],
                         capture_output=True, text=True, timeout=30)
    lines = out.stdout.splitlines()
    assert (0, ["---", "dd-slurm attempt", "---"]) == (out.returncode, lines[:3])
    assert ["  [*] --> staged"] == [line for line in lines if "[*]" in line]
    assert ["  Class done s_active"] == [line for line in lines if "s_active" in line and "Class" in line]


def test_cleanup_notes_and_leftovers_stand_next_to_the_verdict() -> None:
    """The cleanup lines: the verdict with its runs and time, then each note and the leftovers
    it killed or could not, before the processes."""
    from dd_slurm.control.report import cleanup_lines

    report = {"verdict": "attention", "runs": 2, "seconds": 3.25, "notes": ["grace cut to 1.0s by the cleanup budget"],
              "leftovers_killed": [{"pid": 7}], "leftovers_after": [{"pid": 9}],
              "processes": [{"name": "deploy-big-0", "how": "terminated"}], "problems": ["pid 9 survived SIGKILL"]}
    assert ["cleanup: attention (runs: 2, 3.2s)", "  note: grace cut to 1.0s by the cleanup budget",
            "  leftovers: 1 killed, 1 still there after the scan", "  deploy-big-0: terminated",
            "  problem: pid 9 survived SIGKILL"] == cleanup_lines(report)


def test_a_cancel_the_user_requested_is_named_in_the_failure() -> None:
    """A SIGTERM after `dd-slurm cancel` recorded its request: the failure line says so."""
    from dd_slurm.control.report_inspect import failure_and_log

    history = [{"kind": "transition", "from": "client", "to": "cleanup", "outcome": "cancelled", "reason": "sigterm",
                "detail": "received SIGTERM"}]
    asked = failure_and_log({"history": history, "record": {"cancel_requests": [{"time": 1.0}]}})
    unasked = failure_and_log({"history": history, "record": {"cancel_requests": []}})
    assert ("failure: sigterm in client: received SIGTERM (requested with dd-slurm cancel)",
            "failure: sigterm in client: received SIGTERM") == (asked[0], unasked[0])


@pytest.mark.parametrize(("served", "named"), [((10, 10, 10, 10), []), ((13, 13, 13, 1), ["big-3"]),
                                               ((3, 3, 3, 0), [])])
def test_a_replica_far_below_its_share_is_named(served: tuple, named: list) -> None:
    """Four replicas of one alias: one that served under half its even share (with 20 requests or
    more) is named with its log; an even spread, or too few requests to judge, names none."""
    from dd_slurm.control.report_inspect import underserved

    figures = {"requests": sum(served), "replicas": [{"deployment": "big", "replica": k, "requests": n}
                                                     for k, n in enumerate(served)]}
    assert [f"    note: {n} served 2% of the requests, under half its share (25%); see logs/deploy-{n}.log"
            for n in named] == underserved(figures)


def test_the_images_an_attempt_ran_are_named_with_their_digests() -> None:
    """inspect names each container image by where it ran, with the digest checked before launch
    (a registry reference has none); an attempt without images shows no such section, and a
    malformed images.json shows nothing rather than failing."""
    from dd_slurm.control.report_inspect import image_lines

    used = {"deployments.qwen": {"image": "/i/vllm.sqsh", "sha256": "ab" * 32},
            "client": {"image": "nvcr.io#nvidia/dd:1", "sha256": None}}
    assert ["images:", "  client: image nvcr.io#nvidia/dd:1 sha256 (registry reference: pulled by pyxis)",
            f"  deployments.qwen: image /i/vllm.sqsh sha256 {'ab' * 32}"] == image_lines(used)
    assert ([], [], []) == (image_lines(None), image_lines([1]), image_lines({"client": "x"}))
