"""The gateway process against hostile clients and replicas, on real loopback sockets: request
smuggling, key-less exhaustion (slow heads, large bodies, too many connections), clients that
leave mid-request, slow uploads, and replicas whose answers are malformed."""

from __future__ import annotations

import json
import socket
import time

import pytest

from dd_slurm.gateway.proxy import ClientConnection, Proxy
from tests.gateway.backends import Backend, Client, Gateway, answer, replica, wait_for
from tests.gateway.test_h11_differential import Transport

pytestmark = pytest.mark.timeout(60)

KEY = ("Authorization: Bearer k",)


@pytest.fixture
def made(tmp_path):
    """Backends, gateways and sockets made by a test, torn down after it."""
    things: list = []
    yield things
    for thing in things:
        thing.stop() if isinstance(thing, Gateway) else thing.close()


def start(made: list, tmp_path, behaviour=None, keyed: bool = False, **settings) -> tuple[Backend, Gateway]:
    backend = Backend(behaviour or answer())
    env = {"env": {"GW_KEY": "k"}, "api_key_var": "GW_KEY"} if keyed else {}
    gateway = Gateway(tmp_path, {"m": [replica(backend)]}, **env, **settings).wait_serving()
    made += [backend, gateway]
    return backend, gateway


def raw(made: list, gateway: Gateway, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    made.append(sock)
    if data:
        sock.sendall(data)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the gateway closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


SMUGGLED = (b"POST /m/v1/completions HTTP/1.1\r\nHost: gw\r\nConnection: content-length\r\nContent-Length: 60\r\n\r\n"
            b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 5\r\n\r\nevil!")


def test_a_connection_header_naming_the_framing_is_refused_and_nothing_is_smuggled(made, tmp_path) -> None:
    """`Connection: content-length` would have the framing header dropped and the body read by the
    replica as a second request: it is refused with 400, the replica sees no request at all."""
    backend, gateway = start(made, tmp_path)
    answered = read_all(raw(made, gateway, SMUGGLED))
    assert (b"HTTP/1.1 400 ", []) == (answered[:13], backend.requests)


def test_a_non_canonical_content_length_is_forwarded_as_decided(made, tmp_path) -> None:
    """`Content-Length: 5, 5` is one length to the gateway; the replica is sent `content-length: 5`,
    never the list it might read otherwise."""
    backend, gateway = start(made, tmp_path)
    sock = raw(made, gateway, b"POST /m/v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 5, 5\r\n\r\nhello")
    assert b"HTTP/1.1 200 " == sock.recv(65536)[:13]
    assert [b"POST /v1/x HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-length: 5\r\n\r\nhello" % backend.port] == \
        backend.requests


@pytest.mark.parametrize("body", [b"5 \x0b\r\nhello\r\n0\r\n\r\n", b" 5\r\nhello\r\n0\r\n\r\n",
                                  b"5;a\nb\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloXX0\r\n\r\n"])
def test_a_malformed_chunked_body_is_400(made, tmp_path, body) -> None:
    """A chunked request body with a bad size line (leading whitespace, VT, a bare LF in an
    extension) or a chunk not ended by CRLF is answered 400 and the connection closed."""
    _, gateway = start(made, tmp_path, lambda conn, request, n: False)  # the replica never answers
    sock = raw(made, gateway, b"POST /m/v1/x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    assert b"HTTP/1.1 400 " == read_all(sock)[:13]


def test_a_slow_head_is_cut_at_the_header_timeout(made, tmp_path) -> None:
    """A head that is still incomplete after `header_timeout_s` gets 408 and is closed, however
    steadily its bytes trickle in."""
    _, gateway = start(made, tmp_path, keyed=True, header_timeout_s=0.5)
    sock = raw(made, gateway, b"POST /m/v1/x HTTP/1.1\r\n")
    began = time.monotonic()
    try:
        for _ in range(40):
            sock.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.05)
    except OSError:
        pass
    assert (b"HTTP/1.1 408 ", True) == (read_all(sock)[:13], time.monotonic() - began < 1.5)


def test_an_idle_keep_alive_connection_is_closed_at_the_idle_timeout(made, tmp_path) -> None:
    """After its response, a keep-alive connection that sends nothing is closed once `idle_timeout_s`
    has passed (the gateway's side of the close: the client reads EOF)."""
    _, gateway = start(made, tmp_path, idle_timeout_s=0.4)
    client = Client(gateway.port)
    made.append(client)
    assert 200 == client.request("/m/v1/x")[0]
    began = time.monotonic()
    assert (b"", True) == (client.sock.recv(10), time.monotonic() - began < 2)


def test_connections_beyond_the_cap_are_refused_at_once(made, tmp_path) -> None:
    """With `max_connections: 3` and three connections open, the fourth is answered 503 and closed
    at once (and counted); once one of the three closes, a new one is served."""
    _, gateway = start(made, tmp_path, max_connections=3)
    held = [raw(made, gateway) for _ in range(3)]
    time.sleep(0.3)  # the three are accepted
    refused = read_all(raw(made, gateway))
    held[0].close()
    time.sleep(0.2)
    client = Client(gateway.port)
    made.append(client)
    served = client.request("/m/v1/x")[0]
    counted = json.loads(client.request("/_gateway/stats", None, method="GET")[2])["connections"]
    assert (b"HTTP/1.1 503 ", 200, 1, 3) == (refused[:13], served, counted["refused_at_limit"], counted["open"])


def test_key_less_half_sent_heads_do_not_make_the_gateway_unreachable(made, tmp_path) -> None:
    """60 key-less connections that send half a head and wait: each is cut at the header timeout,
    and a keyed client is served throughout and after."""
    _, gateway = start(made, tmp_path, keyed=True, header_timeout_s=0.5)
    attackers = [raw(made, gateway, b"POST /m/v1/x HTTP/1.1\r\nHost: gw\r\n") for _ in range(60)]
    client = Client(gateway.port)
    made.append(client)
    during = client.request("/m/v1/x", headers=KEY)[0]
    closed = [read_all(sock)[:13] for sock in attackers]
    assert (200, [b"HTTP/1.1 408 "] * 60, 200) == (during, closed, client.request("/m/v1/x", headers=KEY)[0])


def test_key_less_stats_and_404_answers_need_the_key_and_name_no_replica(made, tmp_path) -> None:
    """`GET /_gateway/stats` and an unknown path without the key are 401; with it, the stats name
    no replica address."""
    backend, gateway = start(made, tmp_path, keyed=True)
    statuses = [Client(gateway.port).request(path, None, method="GET")[0] for path in ("/_gateway/stats", "/nope")]
    stats = Client(gateway.port).request("/_gateway/stats", None, KEY, method="GET")[2]
    assert ([401, 401], False) == (statuses, str(backend.port).encode() in stats)


def test_a_client_that_leaves_mid_request_frees_its_slot(made, tmp_path) -> None:
    """A client that closes while its request is in flight (not a half-close to wait on): the
    gateway closes that replica connection (a model server aborts the generation), frees the slot
    (max_inflight 1: the next request is served) and counts `client_gone`."""
    aborted: list[bool] = []

    def wait_for_the_close(conn: socket.socket, _request: bytes, number: int) -> bool:
        if number > 1:
            return answer()(conn, _request, number)
        aborted.append(conn.recv(1) == b"")  # EOF: the gateway closed this replica connection
        return False

    backend = Backend(wait_for_the_close)
    gateway = Gateway(tmp_path, {"m": [replica(backend, max_inflight=1)]}, queue_limit=0).wait_serving()
    made += [backend, gateway]
    sock = raw(made, gateway, b"POST /m/v1/x HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\nhi")
    wait_for(lambda: len(backend.requests) == 1)
    sock.shutdown(socket.SHUT_WR)
    wait_for(lambda: aborted == [True])
    client = Client(gateway.port)
    made.append(client)
    status = client.request("/m/v1/x")[0]
    errors = json.loads(client.request("/_gateway/stats", None, method="GET")[2])["aliases"]["m"]["errors"]
    assert (200, 1) == (status, errors.get("client_gone"))


def test_a_slow_keyed_upload_never_makes_a_healthy_replica_stalled(made, tmp_path) -> None:
    """A 3 MiB upload (streamed, not pre-read) sent in pieces over 2 s, with a stall timeout of
    0.5 s: the upload's bytes are progress, so the replica is not stalled and answers 200."""
    backend, gateway = start(made, tmp_path, keyed=True, stall_timeout_s=0.5)
    body = b"x" * (3 << 20)
    sock = raw(made, gateway, b"POST /m/v1/x HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer k\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(body))
    for offset in range(0, len(body), len(body) // 20):
        sock.sendall(body[offset:offset + len(body) // 20])
        time.sleep(0.1)
    assert (b"HTTP/1.1 200 ", None) == (sock.recv(65536)[:13], gateway.proc.poll())


@pytest.mark.parametrize("head", [b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
                                  b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"])
def test_a_malformed_replica_answer_is_a_bad_gateway(made, tmp_path, head) -> None:
    """A status code outside 100-599, or a response head over 64 KiB (its end arriving in the same
    read as its start or later), is answered 502 to the client."""
    def send_head(conn: socket.socket, _request: bytes, _n: int) -> bool:
        conn.sendall(head)
        return True

    _, gateway = start(made, tmp_path, send_head)
    client = Client(gateway.port)
    made.append(client)
    assert 502 == client.request("/m/v1/x")[0]


def test_a_head_sent_in_small_pieces_grows_one_buffer_in_place() -> None:
    """64,000 bytes of an unfinished head in 128-byte pieces: the connection appends each piece to
    one buffer and scans only what is new (no re-concatenation, no re-scan: the cost of a piece does
    not grow with what came before it)."""
    conn = ClientConnection(Proxy({}, None, 1, 1.0, lambda: 1.0, dict))
    transport = Transport()
    conn.connection_made(transport)
    buffer, scans = conn.buffer, []
    conn.data_received(b"POST /m/v1/x HTTP/1.1\r\n")
    for _ in range(500):
        conn.data_received(b"a" * 128)
        scans.append(conn.scanned)
    assert (True, list(range(23 + 128, 23 + 128 * 501, 128))) == (conn.buffer is buffer, scans)
