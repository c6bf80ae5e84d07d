"""The gateway's HTTP/1.1 framing held to h11, a strict reference parser (test-only, as pyarrow is
for the Parquet reader). Hypothesis builds and mutates request heads, chunked bodies and replica
responses; the gateway must refuse whatever h11 refuses, and agree with it on the framing (length,
chunked, until-close) and on keep-alive for everything both accept. The gateway may refuse more
than h11, but only for the reasons in STRICTER, each a documented choice (README, "The gateway's
security model")."""

from __future__ import annotations

import re
import socket

import h11
import pytest
from h11._connection import _body_framing, _keep_alive
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.gateway import http1
from dd_slurm.gateway.http1 import CHUNKED, NO_BODY, UNTIL_CLOSE, BadMessage
from dd_slurm.gateway.pool import READ_LIMIT
from dd_slurm.gateway.proxy import ClientConnection, Proxy

pytestmark = pytest.mark.timeout(120)

# Where the gateway is stricter than h11 (each also in the README). A refusal h11 does not make
# must match one of these, or the test fails.
STRICTER = {
    "obsolete line folding": re.compile(rb"\r?\n[ \t]"),
    "bare LF or CR line endings": re.compile(rb"(?<!\r)\n|\r(?!\n)"),
    "control characters other than HTAB in a header value": re.compile(rb":[^\r\n]*[\x00-\x08\x0a-\x1f\x7f]"),
    "both Transfer-Encoding and Content-Length": re.compile(rb"(?is)(?=.*\ntransfer-encoding:)(?=.*\ncontent-length:)"),
    "HTTP versions other than 1.0 and 1.1": re.compile(rb"\AHTTP/(?!1\.[01] )|\A[^\r\n]* HTTP/(?!1\.[01]\r)"),
    "a Content-Length of more than 18 digits": re.compile(rb"(?i)\ncontent-length:[ \t]*[0-9]{19}"),
    "a Connection header naming a framing or routing header": re.compile(
        rb"(?i)\nconnection:[^\r\n]*(content-length|transfer-encoding|host)"),
    "a status code outside 100-599, or 101": re.compile(rb"\AHTTP/1\.[01] (0|[6-9]|101)"),
    "a control character or bare CR in a chunk extension or trailer": re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\r(?!\n)"),
}


def stricter(data: bytes, *names: str) -> bool:
    """Does one of the documented stricter refusals apply to `data`?"""
    return any(STRICTER[name].search(data) for name in names or STRICTER)


class Transport:
    """What a client connection writes and whether it closed."""

    def __init__(self) -> None:
        self.written, self.closed = b"", False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def set_write_buffer_limits(self, high: int) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def gateway_verdict(data: bytes) -> str:
    """What the gateway's client connection does with `data` (no alias matches, so an accepted
    request is answered 404 by the gateway itself): accepted, refused, or incomplete."""
    conn = ClientConnection(Proxy({}, None, 1, 1.0, lambda: 1.0, dict))
    transport = Transport()
    conn.connection_made(transport)
    conn.data_received(data)
    if not transport.written:
        return "incomplete"
    return "accepted" if transport.written.startswith(b"HTTP/1.1 404 ") else "refused"


def h11_request(data: bytes) -> tuple[str, object]:
    """h11's verdict on a request head, and (framing, keep-alive) when it accepts one."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=READ_LIMIT)
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return "refused", None
    if event is h11.NEED_DATA:
        return "incomplete", None
    return "accepted", (_body_framing(event.method, event), _keep_alive(event))


def framing_of(head: http1.Head) -> tuple:
    if head.length == CHUNKED:
        return ("chunked", ())
    if head.length == UNTIL_CLOSE:
        return ("http/1.0", ())
    return ("content-length", (max(head.length, 0),))


NAMES = [b"Host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect", b"X-A", b"Bad Name", b"X\x00",
         b"content-length", b"TRANSFER-ENCODING"]
VALUES = [b"gw", b"5", b"05", b"5, 5", b"5,6", b"-1", b"0x5", b"1" * 19, b"chunked", b"Chunked", b"chunked\x0b",
          b"\x0cchunked", b"gzip, chunked", b",chunked", b"close", b"keep-alive", b"content-length", b"Transfer-Encoding",
          b"host", b"100-continue", b"a\x00b", b"a\rb", b"a\nb", b"a\x7fb", b"a\x01b", b"\ta b\t", b"", b"\xc3\xa9"]
SEPARATORS = [b": ", b":", b" : ", b":\t"]
TARGETS = [b"/m/v1/x", b"/x\ty", b"/x\x00", b"/x\x7f", b"/\x80", b"*", b"/a b", b"/ok?q=1", b"/x\x0b", b""]
REQUEST_LINES = st.tuples(st.sampled_from([b"GET", b"POST", b"G T", b"", b"P\x00ST", b"post"]), st.sampled_from(TARGETS),
                          st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0", b"http/1.1"]))
HEADER_LINES = st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(SEPARATORS), st.sampled_from(VALUES)),
                        max_size=6)
ENDINGS = st.sampled_from([b"\r\n"] * 6 + [b"\n", b"\r", b"\r\n "])
INSERTS = st.lists(st.tuples(st.integers(0, 400), st.sampled_from(list(b"\x00\t\r\n\x0b\x0c\x7f ,:\x80"))), max_size=2)


ROUTED = st.sampled_from([b"/m/v1/x"] * 6 + TARGETS)


@st.composite
def request_heads(draw, targets=None) -> bytes:
    """A request head: mostly well formed, with a Host header usually, and mutations."""
    method, target, version = draw(REQUEST_LINES)
    target = draw(targets) if targets is not None else target
    lines = [method + b" " + target + b" " + version]
    if draw(st.booleans()):
        lines.append(b"Host: gw")
    lines += [name + sep + value for name, sep, value in draw(HEADER_LINES)]
    ending = draw(ENDINGS)
    data = bytearray(ending.join(lines) + ending + ending)
    for position, byte in draw(INSERTS):
        data.insert(position % (len(data) - 1), byte)
    return bytes(data)


@settings(max_examples=1500, deadline=None)
@given(request_heads())
def test_request_heads_are_refused_whenever_h11_refuses_them(data) -> None:
    """Whatever h11 refuses, the gateway refuses (or waits for more, which its header timeout ends);
    whatever it accepts that h11 refuses is nothing; what it refuses that h11 accepts is one of the
    documented stricter refusals; and where both accept, they agree on body framing and keep-alive."""
    ours, (theirs, framing) = gateway_verdict(data), h11_request(data)
    if theirs == "refused":
        assert ours in ("refused", "incomplete"), data
    elif ours == "refused" and theirs == "accepted":
        assert stricter(data), data
    elif ours == "accepted":
        head = http1.parse_request(data[:data.index(b"\r\n\r\n") + 4])
        assert (theirs, framing) == ("accepted", (framing_of(head), not head.close)), data


@st.composite
def chunked_bodies(draw) -> bytes:
    """A chunked body: chunk size lines (padded, with extensions, upper or lower case), data,
    a trailer, and byte mutations."""
    parts = []
    for data in draw(st.lists(st.binary(min_size=1, max_size=12), max_size=3)):
        size = draw(st.sampled_from(["{:x}", "{:X}", "0{:x}", " {:x}", "{:x} ", "{:x}\t", "{:x};a=b", "{:x};a\nb",
                                     "{:x};\x00", "{:x} ;a"])).format(len(data)).encode()
        parts.append(size + b"\r\n" + data + b"\r\n")
    trailer = draw(st.sampled_from([b"", b"X-T: 1\r\n", b"Bad Name: 1\r\n", b"X-T: a\x00\r\n", b"X-T: 1\n"]))
    body = bytearray(b"".join(parts) + b"0\r\n" + trailer + b"\r\n")
    for position, byte in draw(INSERTS):
        body.insert(position % len(body), byte)
    return bytes(body)


def h11_chunked(body: bytes) -> tuple[str, bytes]:
    """h11's verdict on a chunked request body after a valid head: (accepted, data) or (refused|incomplete, b"")."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(b"POST / HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    conn.next_event()
    data = b""
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return "incomplete", b""
            if isinstance(event, h11.EndOfMessage):
                return "accepted", data
            data += event.data
    except h11.RemoteProtocolError:
        return "refused", b""


def gateway_chunked(body: bytes) -> tuple[str, bytes]:
    try:
        pieces, rest = http1.Chunks(dechunk=True).feed(body)
    except BadMessage:
        return "refused", b""
    return ("accepted", b"".join(pieces)) if rest == b"" else ("incomplete" if rest is None else "trailing", b"")


@settings(max_examples=800, deadline=None)
@given(chunked_bodies())
def test_chunked_bodies_are_framed_as_h11_frames_them(body) -> None:
    """A chunked body h11 refuses is refused (never relayed as if it ended somewhere else); one both
    accept yields the same data; one only the gateway refuses breaks a documented stricter rule
    (a control character or bare CR in an extension or trailer line, or a malformed trailer line)."""
    ours, theirs = gateway_chunked(body), h11_chunked(body)
    if theirs[0] == "refused":
        assert ours[0] in ("refused", "incomplete"), body
    elif ours[0] == "refused" and theirs[0] == "accepted":
        assert stricter(body, "a control character or bare CR in a chunk extension or trailer",
                        "obsolete line folding", "bare LF or CR line endings") or b"Bad Name" in body, body
    elif ours[0] == "accepted":
        assert theirs == ours, body


@st.composite
def responses(draw) -> bytes:
    status = draw(st.sampled_from([b"200", b"204", b"304", b"099", b"100", b"101", b"600", b"2000", b"20", b"404"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0"]))
    reason = draw(st.sampled_from([b" OK", b"", b" ", b" a\x00b", b" \xc3\xa9"]))
    lines = [version + b" " + status + reason] + [n + s + v for n, s, v in draw(HEADER_LINES)]
    data = bytearray(b"\r\n".join(lines) + b"\r\n\r\n")
    for position, byte in draw(INSERTS):
        data.insert(position % (len(data) - 1), byte)
    return bytes(data)


def h11_response(data: bytes, method: bytes) -> tuple[str, object]:
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=method, target="/", headers=[("Host", "r")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return "refused", None
    if event is h11.NEED_DATA:
        return "incomplete", None
    if isinstance(event, h11.InformationalResponse):
        return "interim", None
    framing = _body_framing(method, event)
    return "accepted", (framing, _keep_alive(event) and framing[0] != "http/1.0")  # until close: no reuse


@settings(max_examples=800, deadline=None)
@given(responses(), st.sampled_from([b"GET", b"POST", b"HEAD"]))
def test_replica_responses_are_refused_whenever_h11_refuses_them(data, method) -> None:
    """A replica's response head h11 refuses is a bad gateway; where both accept, the body framing
    (length, chunked, until close, none) and keep-alive agree."""
    theirs, framing = h11_response(data, method)
    end = data.find(b"\r\n\r\n")
    try:
        head = http1.parse_response(data[:end + 4], method) if end >= 0 else None
    except BadMessage:
        head = None
        assert theirs != "accepted" or stricter(data), data
    if theirs == "refused":
        assert head is None, data
    elif theirs == "accepted" and head is not None:
        length = ("content-length", (0,)) if head.length == NO_BODY else framing_of(head)
        assert framing == (length, not head.close), data


def h11_requests(data: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(method, target, body) of every complete request h11 reads from `data`, up to the first it refuses."""
    conn, found, current, body = h11.Connection(h11.SERVER, max_incomplete_event_size=READ_LIMIT), [], None, b""
    conn.receive_data(data)
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return found
            if isinstance(event, h11.Request):
                current, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                found.append((current.method, current.target, body))
                conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
                conn.send(h11.EndOfMessage())
                conn.start_next_cycle()
    except (h11.RemoteProtocolError, h11.LocalProtocolError):
        return found


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A gateway (short header and idle timeouts) in front of one backend that records every
    request it receives, byte for byte, and answers each 200."""
    from tests.gateway.backends import Backend, Gateway, answer, replica

    backend = Backend(answer())
    gateway = Gateway(tmp_path_factory.mktemp("recorded"), {"m": [replica(backend)]}, header_timeout_s=0.2,
                      idle_timeout_s=0.2).wait_serving()
    yield backend, gateway
    gateway.stop()
    backend.close()


@st.composite
def client_streams(draw) -> bytes:
    """One connection's bytes: one to three request heads for the alias, each followed by a body
    that may or may not match what its head declares (the room a smuggler works in)."""
    stream = b""
    for _ in range(draw(st.integers(1, 3))):
        head = draw(request_heads(ROUTED))
        body = draw(st.sampled_from([b"", b"hello", b"5\r\nhello\r\n0\r\n\r\n",
                                     b"POST /v1/smuggled HTTP/1.1\r\nHost: r\r\nContent-Length: 0\r\n\r\n"]))
        stream += head + body
    return stream


@settings(max_examples=150, deadline=None)
@given(client_streams())
def test_the_replica_never_sees_a_request_the_client_did_not_send(recorded, data) -> None:
    """Whatever one connection sends, the requests the replica receives are, in order, a prefix of
    the requests h11 reads from the client's bytes (alias stripped), each one h11 accepts as sent:
    nothing smuggled in, nothing framed differently."""
    backend, gateway = recorded
    before = len(backend.requests)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
        sock.sendall(data)
        sock.settimeout(5)
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass
    received = [h11_requests(r) for r in backend.requests[before:]]
    sent = [(m, t[2:], b) for m, t, b in h11_requests(data) if t.startswith(b"/m/")]
    assert [1] * len(received) == [len(r) for r in received], received
    assert [r[0] for r in received] == sent[:len(received)], (data, received)
