"""The gateway's relay on real loopback sockets: pipelining, bodies too large to pre-read,
slow readers, HTTP/1.0 clients, and replicas that close idle keep-alive connections."""

from __future__ import annotations

import socket
import time

import pytest

from tests.gateway.backends import Backend, Client, Gateway, answer, replica, response, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def made(tmp_path):
    """Backends and gateways made by a test, torn down after it."""
    things: list = []
    yield things
    for thing in things:
        thing.stop() if isinstance(thing, Gateway) else thing.close()


def start(made: list, tmp_path, behaviour=None, **settings) -> tuple[Backend, Gateway]:
    backend = Backend(behaviour or answer())
    gateway = Gateway(tmp_path, {"m": [replica(backend)]}, **settings).wait_serving()
    made += [backend, gateway]
    return backend, gateway


def test_pipelined_requests_are_answered_in_order(made, tmp_path) -> None:
    """Two requests sent back to back before any answer get their two answers, in order."""
    backend, gateway = start(made, tmp_path, lambda conn, request, n: conn.sendall(response(200, b"%d" % n)) or True)
    client = Client(gateway.port)
    one = b"POST /m/v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\n\r\na"
    client.sock.sendall(one + one.replace(b"\r\n\r\na", b"\r\n\r\nb"))
    assert [(200, b"1"), (200, b"2")] == [client.receive()[::2] for _ in range(2)]
    assert [b"a", b"b"] == [r[-1:] for r in backend.requests]
    client.close()


def test_a_body_too_large_to_pre_read_is_relayed_whole(made, tmp_path) -> None:
    """A 3 MiB request body (streamed to the replica as it arrives) reaches it byte for byte."""
    backend, gateway = start(made, tmp_path)
    body = bytes(range(256)) * (3 * 4096)
    client = Client(gateway.port)
    assert 200 == client.request("/m/v1/embeddings", body)[0]
    assert backend.requests[0].endswith(b"\r\n\r\n" + body) and len(backend.requests) == 1
    client.close()


def test_a_slow_reader_gets_a_large_response_whole(made, tmp_path) -> None:
    """A client that reads only after the replica wrote 8 MiB (more than the gateway buffers) still
    gets every byte, in order; the same connections then serve the next request."""
    big = bytes(range(256)) * (8 * 4096)
    backend, gateway = start(made, tmp_path, answer(body=big))
    client = Client(gateway.port, timeout=30)
    client.send("/m/v1/completions")
    time.sleep(1.0)
    first = client.receive()
    assert (200, True, 200, 1) == (first[0], first[2] == big, client.request("/m/v1/completions")[0],
                                   backend.connections)
    client.close()


def test_an_http_1_0_client_gets_a_chunked_response_dechunked(made, tmp_path) -> None:
    """HTTP/1.0 has no chunked coding: the body goes out as plain bytes and the connection closes."""
    def chunks(conn: socket.socket, _request: bytes, _n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        return True

    _, gateway = start(made, tmp_path, chunks)
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    sock.sendall(b"GET /m/v1/models HTTP/1.0\r\n\r\n")
    received = b""
    while data := sock.recv(65536):
        received += data
    sock.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert (b"abcde", False, True) == (body, b"transfer-encoding" in head.lower(), b"connection: close" in head)


def test_a_replica_closing_idle_connections_costs_no_502(made, tmp_path) -> None:
    """A replica that closes each connection right after its response, without saying so: once it
    has closed, the next request goes on a new connection (the pooled one's close is seen before
    anything is written to it, even before the event loop has read it), so none gets a 502 and
    the replica sees each request once. (A close that crosses the next request on the wire is
    a 502 instead: the request's bytes went out, and are never sent twice.)"""
    backend, gateway = start(made, tmp_path, lambda conn, request, n: conn.sendall(response()) and False)
    client = Client(gateway.port)
    statuses = []
    for number in range(1, 31):
        statuses.append(client.request("/m/v1/completions")[0])
        wait_for(lambda n=number: backend.closed == n)
    assert ([200] * 30, 30, 30) == (statuses, len(backend.requests), backend.connections)
    client.close()


def test_a_request_head_over_64_kib_is_431_and_closed(made, tmp_path) -> None:
    """A request head longer than the gateway reads (64 KiB) is refused with 431 and the connection
    closes; the replica sees nothing."""
    backend, gateway = start(made, tmp_path)
    client = Client(gateway.port)
    client.sock.sendall(b"GET /m/v1/models HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n")
    status, headers, _ = client.receive()
    assert (431, "close", 0) == (status, headers.get("connection"), len(backend.requests))
    client.close()
