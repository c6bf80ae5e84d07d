"""The replicas' own counters: the /metrics parser held to prometheus_client's, a counter reset (a
restarted replica) that never makes the gateway's totals go down, generation progress as stall
progress, and the fake model server's vLLM names read through a real socket."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from dd_slurm.gateway.config import ReplicaTarget
from dd_slurm.gateway.pool import Replica
from dd_slurm.gateway.replica_metrics import NAMES, NotExposed, parse, read_metrics
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(60)

VALUES = st.floats(0, 1e12, allow_nan=False, allow_infinity=False)
LABEL_SETS = st.lists(st.tuples(st.sampled_from(["m", "a b", 'q"x', "é"]), VALUES), min_size=1, max_size=3,
                      unique_by=lambda t: t[0])


def exposition(samples: dict[str, list[tuple[str, float]]]) -> str:
    lines = ["# HELP other_metric x", "# TYPE other_metric gauge", "other_metric{x=\"}\"} 5"]
    for name, pairs in samples.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        lines += [f"# HELP {name} x", f"# TYPE {name} {kind}"]
        for model, value in pairs:
            escaped = model.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'{name}{{model_name="{escaped}"}} {value!r}')
    return "\n".join(lines) + "\n"


@given(st.dictionaries(st.sampled_from([n for names in NAMES.values() for n in names]), LABEL_SETS, max_size=6))
def test_parse_agrees_with_prometheus_client(samples) -> None:
    """For any exposition of our names (and others), each of ours sums to what prometheus_client's
    parser reads."""
    text = exposition(samples)
    reference: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            ours = next((o for o, names in NAMES.items() if sample.name in names), None)
            if ours is not None:
                reference[ours] = reference.get(ours, 0.0) + sample.value
    assert pytest.approx(reference) == parse(text)


@pytest.mark.parametrize(("text", "message"), [
    ("vllm:generation_tokens_total{a=\"b\"} NaN\n", "line 1: not a sample of vllm:generation_tokens_total"),
    ("vllm:num_requests_running -3\n", "line 1: not a sample of vllm:num_requests_running"),
    ("# x\nvllm:prompt_tokens_total{\n", "line 2: not a sample of vllm:prompt_tokens_total"),
])
def test_a_bad_sample_of_our_names_is_refused_by_line(text, message) -> None:
    """Our names' lines are parsed strictly: NaN, a negative count, broken labels name the line."""
    with pytest.raises(ValueError) as err:
        parse(text)
    assert message == str(err.value)


def test_a_restarted_replicas_counters_add_to_what_it_had_counted() -> None:
    """Tokens 100 then 150, then a new process says 20: the totals are 100, 150, 170; tokens that
    grew with a request in flight are progress, with none in flight they are not."""
    replica = Replica(ReplicaTarget("d", 0, "http://127.0.0.1:9000/v1"), 0)
    seen = []
    for now, tokens, inflight in ((1.0, 100.0, 0), (2.0, 150.0, 0), (3.0, 20.0, 1), (4.0, 30.0, 1)):
        replica.inflight = inflight
        replica.note_server({"generation_tokens": tokens, "prompt_tokens": 1.0}, now, 1000 + now)
        seen.append((replica.server["generation_tokens"], replica.progress))
    assert [(100.0, 0.0), (150.0, 0.0), (170.0, 3.0), (180.0, 4.0)] == seen


def test_the_fake_model_servers_vllm_names_are_read_over_a_socket(tmp_path) -> None:
    """The fake server counts one request's tokens (1 prompt, its words generated); the gateway's
    reader gets them; a server without /metrics is NotExposed."""
    import json
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "dd_slurm" / "testing" / "fake_model.py"), "--port",
                               str(port), "--host", "127.0.0.1", "--model", "m"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(request, timeout=10))
        found = asyncio.run(read_metrics("127.0.0.1", port))
        assert {"prompt_tokens": 1.0, "generation_tokens": float(answer["usage"]["completion_tokens"]),
                "running": 0.0, "waiting": 0.0} == found
    finally:
        server.terminate()
        server.wait(10)


def test_a_server_without_metrics_is_not_exposed() -> None:
    """A 404 at /metrics: NotExposed (the gateway stops asking)."""
    async def scenario() -> str:
        async def answer(reader, writer) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await read_metrics("127.0.0.1", port)
        except NotExposed:
            return "not exposed"
        finally:
            server.close()
        return "read"

    assert "not exposed" == asyncio.run(scenario())


def start_model(*extra: str) -> tuple[subprocess.Popen, int]:
    import socket
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "dd_slurm" / "testing" / "fake_model.py"), "--port",
                               str(port), "--host", "127.0.0.1", "--model", "m", *extra], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server, port
        except OSError:
            time.sleep(0.05)
    raise AssertionError("the fake model server never answered")


@pytest.mark.parametrize(("extra", "stalled"), [(("--latency-s", "3"), False),
                                                 (("--stall-after-requests", "0"), True)])
def test_a_long_generation_whose_counters_move_is_not_a_stall(tmp_path, extra, stalled) -> None:
    """stall_timeout_s 1: a non-streamed request that takes 3 s sends no byte for 3 s, but the
    replica's generation counter moves every 0.1 s, so the gateway answers it 200 and does not
    call the replica stalled; a replica that holds the request with its counters still is stalled
    (exit 75). The stats carry the replica's own counts."""
    from tests.gateway.backends import Client, Gateway, replica

    server, port = start_model(*extra)
    gateway = Gateway(tmp_path, {"m": [replica(port)]}, stall_timeout_s=1.0, replica_metrics=True).wait_serving()
    try:
        client = Client(gateway.port, timeout=10)
        client.send("/m/v1/chat/completions", b'{"model": "m", "messages": [{"role": "user", "content": "a b c d"}]}',
                    ("content-type: application/json",))
        if stalled:
            assert 75 == gateway.proc.wait(20)
            return
        status, _headers, _body = client.receive()
        time.sleep(1.5)  # one scrape after the answer
        gateway.stop()
        counted = gateway.stats()["aliases"]["m"]["replicas"][0]["server"]
        assert (200, None, True) == (status, gateway.state().get("stalled") or None, counted["generation_tokens"] > 0)
    finally:
        gateway.stop()
        server.terminate()
        server.wait(10)
