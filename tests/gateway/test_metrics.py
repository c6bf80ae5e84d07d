"""`GET /metrics`: the gateway's accounting as Prometheus text, held to prometheus_client's parser;
the key is required as on every path; the counts are the stats' counts."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dd_slurm.gateway.stats import Latency
from tests.gateway.backends import Backend, Client, Gateway, answer, replica

pytestmark = pytest.mark.timeout(60)


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_need_the_key_and_agree_with_the_stats(tmp_path) -> None:
    """Three requests to alias m over two replicas (one answered 503): /metrics without the key
    is 401; with it, 200 `text/plain; version=0.0.4`, parsed by prometheus_client into every
    family with the stats' counts (requests, 2xx/5xx, per replica, the duration histogram)."""
    ok, failing = Backend(answer()), Backend(answer(503))
    gateway = Gateway(tmp_path, {"m": [replica(ok, 0), replica(failing, 1)]}, env={"GW_KEY": "k"},
                      api_key_var="GW_KEY").wait_serving()
    client = Client(gateway.port)
    try:
        key = ("Authorization: Bearer k",)
        statuses = sorted(client.request("/m/v1/completions", headers=key)[0] for _ in range(3))
        assert 401 == Client(gateway.port).request("/metrics", None, method="GET")[0]
        status, headers, body = client.request("/metrics", None, key, method="GET")
        found = families(body.decode())
        stats = client.request("/_gateway/stats", None, key, method="GET")
        assert (200, "text/plain; version=0.0.4; charset=utf-8") == (status, headers["content-type"]), stats
        requests = {s.labels["alias"]: s.value for s in found["dd_slurm_gateway_requests"].samples}
        responses = {s.labels["status_class"]: s.value for s in found["dd_slurm_gateway_responses"].samples}
        per_replica = sorted(s.value for s in found["dd_slurm_gateway_replica_requests"].samples)
        duration = {s.name: s.value for s in found["dd_slurm_gateway_request_duration_seconds"].samples
                    if s.labels.get("le") in (None, "+Inf")}
        assert ({"m": 3.0}, {"2xx": statuses.count(200), "5xx": statuses.count(503)}, 3.0, 3.0) == (
            requests, responses, sum(per_replica), duration["dd_slurm_gateway_request_duration_seconds_count"])
        assert {"counter", "gauge", "histogram"} == {f.type for f in found.values()}
    finally:
        client.close()
        gateway.stop()
        ok.close()
        failing.close()


def test_histogram_buckets_are_cumulative_and_end_at_the_count() -> None:
    """Durations 1 ms, 20 ms and 3 s: each `le` bucket counts the durations at or below it (at
    the histogram's 2 % resolution); +Inf is the count."""
    latency = Latency()
    for seconds in (0.001, 0.02, 3.0):
        latency.add(seconds)
    assert [0, 1, 2, 2, 3] == latency.at_most([0.0005, 0.005, 0.025, 2.5, 5.0])
