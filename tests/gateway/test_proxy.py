"""The gateway process against scripted backends, all on real loopback sockets."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.gateway.backends import Backend, Client, Gateway, answer, close_after_read, closed_port, replica, response, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def world(tmp_path):
    """Makes backends, gateways and clients; tears them all down."""

    class World:
        def __init__(self) -> None:
            self.backends: list[Backend] = []
            self.gateways: list[Gateway] = []
            self.clients: list[Client] = []

        def backend(self, behaviour=None) -> Backend:
            made = Backend(behaviour or answer())
            self.backends.append(made)
            return made

        def gateway(self, aliases: dict, env: dict | None = None, **settings) -> Gateway:
            made = Gateway(tmp_path, aliases, env, **settings).wait_serving()
            self.gateways.append(made)
            return made

        def client(self, gateway: Gateway) -> Client:
            made = Client(gateway.port)
            self.clients.append(made)
            return made

    made = World()
    yield made
    for client in made.clients:
        client.close()
    for backend in made.backends:
        backend.close()
    for gateway in made.gateways:
        gateway.stop()


def held(backend: Backend) -> Backend:
    backend.behaviour = backend.hold()
    return backend


def test_forwards_path_headers_and_body_unchanged_but_host(world) -> None:
    """`/<alias>/v1/chat/completions` reaches the replica as `/v1/chat/completions`, with every
    end-to-end header and the body byte for byte; Host is the replica's, Connection is dropped."""
    backend = world.backend()
    gateway = world.gateway({"m": [replica(backend)]})
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    status, _, answered = world.client(gateway).request(
        "/m/v1/chat/completions", body, ("X-Custom: kept as is", "Connection: keep-alive", "User-Agent: t/1"))
    expected = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\nX-Custom: kept as is\r\n"
                b"User-Agent: t/1\r\nContent-Length: %d\r\n\r\n%s" % (backend.port, len(body), body))
    assert (200, b'{"ok": true}', [expected]) == (status, answered, backend.requests)


def test_least_outstanding_requests_wins_over_turns(world) -> None:
    """While replica 0 holds one request, the next five all go to replica 1 (round-robin alone
    would have sent some to replica 0)."""
    slow, fast = world.backend(), world.backend()
    held(slow)
    gateway = world.gateway({"m": [replica(slow, 0), replica(fast, 1)]})
    world.client(gateway).send("/m/v1/completions")
    wait_for(lambda: len(slow.requests) == 1)
    statuses = [world.client(gateway).request("/m/v1/completions")[0] for _ in range(5)]
    assert ([200] * 5, 1, 5) == (statuses, len(slow.requests), len(fast.requests))


def test_ties_go_round_robin(world) -> None:
    """Equally loaded (idle) replicas take sequential requests in turn."""
    backends = [world.backend() for _ in range(3)]
    gateway = world.gateway({"m": [replica(b, i) for i, b in enumerate(backends)]})
    client = world.client(gateway)
    for _ in range(6):
        assert 200 == client.request("/m/v1/completions")[0]
    assert [2, 2, 2] == [len(b.requests) for b in backends]


def test_a_request_that_reached_a_replica_is_never_sent_again(world) -> None:
    """A replica that reads the request and closes: the client gets 502 with a JSON error; that
    replica saw the request exactly once and the healthy replica never saw it."""
    broken, healthy = world.backend(close_after_read), world.backend()
    gateway = world.gateway({"m": [replica(broken, 0), replica(healthy, 1)]})
    status, _, body = world.client(gateway).request("/m/v1/completions")
    assert (502, "replica_failed", 1, 0) == (status, json.loads(body)["error"]["code"], len(broken.requests),
                                             len(healthy.requests))


def test_connection_refused_goes_to_another_replica(world) -> None:
    """A replica that refuses connections (nothing sent yet) is skipped: every request succeeds on
    the other replica, and the refusal is counted."""
    healthy = world.backend()
    gateway = world.gateway({"m": [replica(closed_port(), 0), replica(healthy, 1)]})
    statuses = [world.client(gateway).request("/m/v1/completions")[0] for _ in range(4)]
    assert 0 == gateway.stop()
    refused = gateway.stats()["aliases"]["m"]["replicas"][0]["errors"]
    assert ([200] * 4, 4, 1) == (statuses, len(healthy.requests), refused["connect_failed"])


def test_every_replica_refusing_answers_502(world) -> None:
    """When no replica accepts a connection the client gets 502 replica_unreachable."""
    gateway = world.gateway({"m": [replica(closed_port(), 0), replica(closed_port(), 1)]})
    status, _, body = world.client(gateway).request("/m/v1/completions")
    assert (502, "replica_unreachable") == (status, json.loads(body)["error"]["code"])


def test_streaming_chunks_arrive_before_the_replica_finishes(world) -> None:
    """Server-sent events: the first chunk reaches the client while the replica still holds the
    rest; the chunked framing is relayed as sent."""
    proceed = threading.Event()

    def stream(conn: socket.socket, _request: bytes, _n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"d\r\ndata: first\n\n\r\n")
        proceed.wait(20)
        conn.sendall(b"e\r\ndata: second\n\n\r\n0\r\n\r\n")
        return True

    gateway = world.gateway({"m": [replica(world.backend(stream))]})
    client = world.client(gateway)
    client.send("/m/v1/chat/completions", b'{"stream": true}')
    wait_for(lambda: (client._more() or b"data: first" in client.buffer))
    first_seen_before_release = not proceed.is_set()
    proceed.set()
    status, headers, body = client.receive()
    assert (True, 200, "chunked", b"data: first\n\ndata: second\n\n") == (
        first_seen_before_release, status, headers["transfer-encoding"], body)


def test_full_queue_answers_429_with_retry_after_and_json_error(world) -> None:
    """max_inflight 1 and queue_limit 1: the first request is in flight, the second waits, the
    third gets 429 at once (Retry-After, OpenAI-style body); the waiting one is served later."""
    backend = held(world.backend())
    gateway = world.gateway({"m": [replica(backend, max_inflight=1)]}, queue_limit=1, retry_after_s=2)
    first, second = world.client(gateway), world.client(gateway)
    first.send("/m/v1/completions")
    wait_for(lambda: len(backend.requests) == 1)
    second.send("/m/v1/completions")
    time.sleep(0.2)
    status, headers, body = world.client(gateway).request("/m/v1/completions")
    backend.release.set()
    error = json.loads(body)["error"]
    assert (429, "2", "queue_full", "rate_limit_error", 200, 200, 2) == (
        status, headers["retry-after"], error["code"], error["type"], first.receive()[0], second.receive()[0],
        len(backend.requests))
    assert set(error) == {"message", "type", "code"}


def test_a_wait_longer_than_the_queue_timeout_answers_429(world) -> None:
    """A queued request that waits queue_timeout_s gets 429 queue_timeout, and never reaches the replica."""
    backend = held(world.backend())
    gateway = world.gateway({"m": [replica(backend, max_inflight=1)]}, queue_timeout_s=0.3)
    world.client(gateway).send("/m/v1/completions")
    wait_for(lambda: len(backend.requests) == 1)
    status, headers, body = world.client(gateway).request("/m/v1/completions")
    assert (429, "1", "queue_timeout", 1) == (status, headers["retry-after"], json.loads(body)["error"]["code"],
                                              len(backend.requests))


def test_a_client_that_left_the_queue_sends_nothing_to_a_replica(world) -> None:
    """A queued request whose client closed its connection is dropped when its turn comes: the
    replica sees only the request that was in flight."""
    backend = held(world.backend())
    gateway = world.gateway({"m": [replica(backend, max_inflight=1)]})
    world.client(gateway).send("/m/v1/completions")
    wait_for(lambda: len(backend.requests) == 1)
    leaving = Client(gateway.port)
    leaving.send("/m/v1/completions")
    probe = world.client(gateway)
    wait_for(lambda: json.loads(probe.request("/_gateway/stats", None, method="GET")[2])["aliases"]["m"]["peak_queue"])
    leaving.close()
    backend.release.set()
    stats = lambda: json.loads(probe.request("/_gateway/stats", None, method="GET")[2])["aliases"]["m"]
    wait_for(lambda: stats()["errors"].get("client_gone") == 1)
    assert 1 == len(backend.requests)


@pytest.mark.parametrize("status", [429, 503])
def test_replica_429_and_503_pass_through_unchanged(world, status) -> None:
    """A replica's own 429/503 reaches the client as sent: status, Retry-After and body."""
    body = b'{"error": {"message": "busy", "type": "x", "code": 1}}'
    gateway = world.gateway({"m": [replica(world.backend(answer(status, body, ("Retry-After: 7",))))]})
    got_status, headers, got_body = world.client(gateway).request("/m/v1/completions")
    assert (status, "7", body) == (got_status, headers["retry-after"], got_body)


def test_api_key_is_required_and_passed_on(world) -> None:
    """With the key variable set, no or a wrong `Authorization: Bearer` gets 401 (JSON error) and
    the connection closed; the right one is served, and the replica receives the key."""
    backend = world.backend()
    gateway = world.gateway({"m": [replica(backend)]}, env={"GW_KEY": "k-123"}, api_key_var="GW_KEY")
    missing = world.client(gateway).request("/m/v1/models", None, method="GET")
    wrong = world.client(gateway).request("/m/v1/models", None, ("Authorization: Bearer nope",), method="GET")
    right = world.client(gateway).request("/m/v1/models", None, ("Authorization: Bearer k-123",), method="GET")
    assert ((401, "invalid_api_key", "close"), (401, "invalid_api_key", "close"), 200) == (
        (missing[0], json.loads(missing[2])["error"]["code"], missing[1].get("connection")),
        (wrong[0], json.loads(wrong[2])["error"]["code"], wrong[1].get("connection")), right[0])
    assert [b"authorization: bearer k-123" in r.lower() for r in backend.requests] == [True]


@pytest.mark.parametrize("framing", ["Content-Length: 1000000", "Transfer-Encoding: chunked"])
def test_a_keyless_request_is_refused_before_its_body_is_read(world, framing) -> None:
    """The key is checked once the head is complete: a key-less head announcing a 1 MB body (none
    of it sent, `Expect: 100-continue`) is answered 401 at once, with no `100 Continue`, and closed."""
    gateway = world.gateway({"m": [replica(world.backend())]}, env={"GW_KEY": "k"}, api_key_var="GW_KEY")
    client = world.client(gateway)
    client.sock.sendall(f"POST /m/v1/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\n{framing}"
                        "\r\n\r\n".encode())
    status, headers, _ = client.receive()
    client.sock.settimeout(5)
    assert (401, "close", b"") == (status, headers.get("connection"), client.sock.recv(100))


def test_missing_key_variable_stops_the_gateway(tmp_path) -> None:
    """A configured key variable that is not set is a configuration error: exit 2, one error line."""
    gateway = Gateway(tmp_path, {"m": [replica(closed_port())]}, api_key_var="GW_KEY")
    assert 2 == gateway.proc.wait(10)
    assert ["error: api_key_var: the environment variable GW_KEY is not set"] == [
        line.split(": ", 1)[1] for line in gateway.proc.stderr.read().splitlines()]


def test_a_silent_replica_is_reported_stalled(world) -> None:
    """A replica with a request in flight that sends nothing for stall_timeout_s: the gateway
    writes state "stalled" naming it, writes its stats, and exits with the stall code (75)."""
    backend = held(world.backend())
    idle = world.backend()
    gateway = world.gateway({"m": [replica(backend, 0, "dep-a"), replica(idle, 1, "dep-b")]}, stall_timeout_s=0.5)
    world.client(gateway).send("/m/v1/completions")
    assert 75 == gateway.proc.wait(20)
    state = gateway.state()
    assert ("stalled", [("dep-a", 0, 1)]) == (state["state"], [(s["deployment"], s["replica"], s["inflight"])
                                                               for s in state["stalled"]])
    assert 1 == gateway.stats()["aliases"]["m"]["replicas"][0]["requests"]


def test_stats_per_alias_and_replica_written_on_sigterm(world) -> None:
    """SIGTERM: exit 0, state "stopped", and gateway-stats.json with requests, status classes,
    429s, peaks and latency quantiles per alias and replica; the live stats path agrees."""
    def second_waits(conn: socket.socket, _request: bytes, number: int) -> bool:
        time.sleep(0.05)
        if number == 2:
            backend.release.wait(30)
        conn.sendall(response())
        return True

    backend = world.backend(second_waits)
    gateway = world.gateway({"m": [replica(backend, max_inflight=1)]}, queue_limit=0)
    client = world.client(gateway)
    assert 200 == client.request("/m/v1/completions")[0]
    second = world.client(gateway)
    second.send("/m/v1/completions")
    wait_for(lambda: len(backend.requests) == 2)
    rejected = client.request("/m/v1/completions")[0]
    backend.release.set()
    assert (429, 200) == (rejected, second.receive()[0])
    live = json.loads(client.request("/_gateway/stats", None, method="GET")[2])
    assert 0 == gateway.stop()
    alias = gateway.stats()["aliases"]["m"]
    got = (alias["requests"], alias["responses"], alias["rejected_429"], alias["peak_queue"],
           alias["replicas"][0]["requests"], alias["replicas"][0]["peak_inflight"], gateway.state()["state"])
    assert (3, {"2xx": 2, "4xx": 1}, {"queue_full": 1, "queue_timeout": 0}, 0, 2, 1, "stopped") == got
    assert alias["replicas"][0]["latency"]["p50_ms"] >= 50 and live["aliases"]["m"]["requests"] == 3


def test_keep_alive_both_sides(world) -> None:
    """Sequential requests on one client connection reuse one replica connection."""
    backend = world.backend()
    gateway = world.gateway({"m": [replica(backend)]})
    client = world.client(gateway)
    statuses = [client.request("/m/v1/completions")[0] for _ in range(5)]
    assert ([200] * 5, 1) == (statuses, backend.connections)


def test_chunked_request_body_is_relayed(world) -> None:
    """A chunked request body reaches the replica with its framing."""
    backend = world.backend()
    gateway = world.gateway({"m": [replica(backend)]})
    client = world.client(gateway)
    client.sock.sendall(b"POST /m/v1/completions HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert 200 == client.receive()[0]
    assert backend.requests[0].endswith(b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")


@pytest.mark.parametrize(("path", "code"), [("/nope/v1/models", "model_not_found"), ("/", "model_not_found")])
def test_unknown_alias_is_404(world, path, code) -> None:
    """A path that names no alias is 404 with a JSON error listing the aliases."""
    gateway = world.gateway({"m": [replica(world.backend())]})
    status, _, body = world.client(gateway).request(path, None, method="GET")
    assert (404, code) == (status, json.loads(body)["error"]["code"])


def test_models_are_answered_by_a_replica(world) -> None:
    """`GET /<alias>/v1/models` is forwarded to a replica and its answer returned."""
    models = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
    backend = world.backend(answer(body=models))
    gateway = world.gateway({"m": [replica(backend)]})
    status, _, body = world.client(gateway).request("/m/v1/models", None, method="GET")
    assert (200, models, b"GET /v1/models HTTP/1.1") == (status, body, backend.requests[0].split(b"\r\n")[0])


def test_malformed_request_is_400_and_closed(world) -> None:
    """Both Content-Length and Transfer-Encoding (a smuggling shape) is 400, and the connection closes."""
    gateway = world.gateway({"m": [replica(world.backend())]})
    client = world.client(gateway)
    client.sock.sendall(b"POST /m/v1/x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
    status, headers, _ = client.receive()
    assert (400, "close") == (status, headers.get("connection"))


def test_response_without_length_ends_at_close(world) -> None:
    """A replica response with neither length nor chunking is relayed until the replica closes, then
    the client connection closes too."""
    def until_close(conn: socket.socket, _request: bytes, _n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of it")
        return False

    gateway = world.gateway({"m": [replica(world.backend(until_close))]})
    client = world.client(gateway)
    client.send("/m/v1/completions")
    while True:
        data = client.sock.recv(65536)
        if not data:
            break
        client.buffer += data
    assert client.buffer.endswith(b"connection: close\r\n\r\nall of it")


def test_response_helper_is_well_formed() -> None:
    """The scripted backends' responses carry their length (guards the helpers themselves)."""
    assert response(200, b"ab").endswith(b"Content-Length: 2\r\n\r\nab")


def test_a_draining_gateway_refuses_new_requests_and_lets_in_flight_ones_finish(world) -> None:
    """SIGUSR2 (the attempt is stopping): a request in flight at a replica still gets its 200; a
    new one gets 503 `draining` with Retry-After and is never sent to a replica; the state file
    says `draining`, then `drained` once nothing is in flight, and the stats count the refusal."""
    import signal

    backend = world.backend()
    backend.behaviour = backend.hold()
    gateway = world.gateway({"m": [replica(backend)]})
    in_flight = world.client(gateway)
    in_flight.send("/m/v1/completions")
    wait_for(lambda: len(backend.requests) == 1)
    gateway.proc.send_signal(signal.SIGUSR2)
    wait_for(lambda: gateway.state()["state"] == "draining")
    status, headers, body = world.client(gateway).request("/m/v1/completions")
    assert (503, "30", "draining", "draining") == (status, headers.get("retry-after"),
                                                   json.loads(body)["error"]["code"], gateway.state()["state"])
    backend.release.set()
    assert 200 == in_flight.receive()[0]
    wait_for(lambda: gateway.state()["state"] == "drained")
    assert (0, 1, 1) == (gateway.stop(), len(backend.requests), gateway.stats()["connections"]["refused_draining"])


def test_stats_are_written_every_few_seconds_while_serving_with_the_last_minute(world) -> None:
    """Without any signal, gateway-stats.json appears within the stats period while the gateway
    serves, and its `window` counts the requests (and 2xx) of the last minute."""
    from dd_slurm.gateway.service import STATS_EVERY_S

    gateway = world.gateway({"m": [replica(world.backend())]})
    client = world.client(gateway)
    assert [200, 200] == [client.request("/m/v1/completions")[0] for _ in range(2)]
    wait_for(lambda: gateway.stats_path.exists(), STATS_EVERY_S + 5)
    window = gateway.stats()["window"]
    assert (2, 2, True) == (window["requests"], window["ok"], 0 < window["seconds"] <= STATS_EVERY_S + 1)
    assert gateway.proc.poll() is None
