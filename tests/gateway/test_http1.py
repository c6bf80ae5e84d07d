"""HTTP/1.1 framing (pure): heads parse to what they say, framing is strict, hop-by-hop is dropped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.gateway import http1
from dd_slurm.gateway.http1 import CHUNKED, NO_BODY, UNTIL_CLOSE, BadMessage

pytestmark = pytest.mark.timeout(60)

names = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True).filter(
    lambda n: n.lower() not in {"content-length", "transfer-encoding", "connection", "host"})
values = st.from_regex(r"[!-~]([ !-~]{0,30}[!-~])?", fullmatch=True)


@given(st.sampled_from([b"GET", b"POST", b"DELETE"]), st.from_regex(rb"/[a-z0-9/._-]{0,30}", fullmatch=True),
       st.lists(st.tuples(names, values), max_size=8), st.integers(0, 10**12))
def test_request_heads_parse_to_what_they_say(method, target, headers, length) -> None:
    """Any well-formed head: the request line, every header line in order, the Content-Length."""
    lines = [b"Host: gw"] + [f"{n}: {v}".encode() for n, v in headers] + [b"Content-Length: %d" % length]
    head = http1.parse_request(b"\r\n".join([method + b" " + target + b" HTTP/1.1", *lines]) + b"\r\n\r\n")
    assert ((method, target, b"HTTP/1.1"), lines, length, False) == (
        head.start, [line for _, line in head.headers], head.length, head.close)


@pytest.mark.parametrize(("head", "status"), [
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 0x3\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    (b"POST / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nBad Name: a\r\n\r\n", 400),
    (b"POST /  HTTP/1.1\r\n\r\n", 400),
    (b"POST / HTTP/2\r\n\r\n", 400),
])
def test_ambiguous_framing_is_refused(head, status) -> None:
    """Heads whose body framing is ambiguous or unsupported are refused with the right status."""
    with pytest.raises(BadMessage) as err:
        http1.parse_request(head)
    assert status == err.value.status


@pytest.mark.parametrize(("head", "method", "length", "close"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"POST", 5, False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"POST", CHUNKED, False),
    (b"HTTP/1.1 200 OK\r\n\r\n", b"POST", UNTIL_CLOSE, True),
    (b"HTTP/1.1 204 No Content\r\n\r\n", b"POST", NO_BODY, False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"HEAD", NO_BODY, False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n", b"GET", 5, True),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", b"GET", 5, True),
])
def test_response_framing(head, method, length, close) -> None:
    """Response body framing and connection reuse follow RFC 9112 section 6.3."""
    parsed = http1.parse_response(head, method)
    assert (length, close) == (parsed.length, parsed.close)


def test_hop_by_hop_headers_and_those_connection_names_are_dropped() -> None:
    """Connection, Keep-Alive, Host, Expect and names listed in Connection are not forwarded."""
    head = http1.parse_request(b"POST / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"
                               b"Keep-Alive: 5\r\nExpect: 100-continue\r\nAuthorization: Bearer k\r\n"
                               b"Content-Length: 0\r\n\r\n")
    assert [b"Authorization: Bearer k", b"Content-Length: 0"] == http1.forward_lines(head)


@given(st.integers(0, 2**40), st.sampled_from(["", ";ext=1"]))
def test_chunk_size_lines(size, ext) -> None:
    """Chunk size lines in hex, with or without extensions."""
    assert size == http1.chunk_size(f"{size:x}{ext}\r\n".encode())


@pytest.mark.parametrize("line", [b"\r\n", b"-1\r\n", b"zz\r\n", b"1 2\r\n"])
def test_malformed_chunk_sizes_are_refused(line) -> None:
    """A chunk size that is not hex is a framing error."""
    with pytest.raises(BadMessage):
        http1.chunk_size(line)


def chunked(pieces: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\nX-Trailer: 1\r\n\r\n"


def feed_in_pieces(framing, data: bytes, cuts: list[int]) -> tuple[bytes, bytes | None]:
    out, rest, start = [], None, 0
    for end in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        pieces, rest = framing.feed(data[start:end])
        out += pieces
        start = end
        if rest is not None:
            return b"".join(out), rest + data[end:]
    return b"".join(out), rest


@given(st.lists(st.binary(max_size=40), max_size=6), st.lists(st.integers(0, 10**6), max_size=8))
def test_chunked_bodies_come_out_whole_however_they_arrive(pieces, cuts) -> None:
    """Fed in any pieces, a chunked body comes out byte for byte (framing and trailer included),
    or dechunked as its data alone; what follows the body is handed back untouched."""
    body = chunked(pieces)
    passed = feed_in_pieces(http1.Chunks(), body + b"NEXT", cuts)
    dechunked = feed_in_pieces(http1.Chunks(dechunk=True), body + b"NEXT", cuts)
    assert ((body, b"NEXT"), (b"".join(pieces), b"NEXT")) == (passed, dechunked)


@given(st.integers(0, 100), st.lists(st.integers(0, 10**6), max_size=5))
def test_counted_bodies_end_at_their_length(length, cuts) -> None:
    """A Content-Length body ends after exactly that many bytes, however they arrive."""
    data = bytes(range(length)) + b"NEXT"
    assert (data[:length], data[length:]) == feed_in_pieces(http1.Counted(length), data, cuts)


@pytest.mark.parametrize("body", [b"3\r\nabcX\r\n0\r\n\r\n", b"zz\r\n", b"1" * 70000])
def test_malformed_chunked_bodies_are_refused(body) -> None:
    """A chunk not followed by CRLF, a size that is not hex, or an endless size line is a framing error."""
    with pytest.raises(BadMessage):
        http1.Chunks().feed(body)


def test_a_response_head_is_relayed_as_received_when_it_can_be() -> None:
    """An HTTP/1.1 response head without hop-by-hop headers goes out as received (plus
    `connection: close` when asked); one with them is rebuilt without them."""
    raw = b"HTTP/1.1 200 OK\r\nDate: x\r\nContent-Length: 2\r\n\r\n"
    hop = b"HTTP/1.0 200 OK\r\nKeep-Alive: 5\r\nContent-Length: 2\r\n\r\n"
    assert (raw, raw[:-2] + b"connection: close\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n") == (
        http1.forward_response_head(http1.parse_response(raw, b"GET"), frozenset(), False),
        http1.forward_response_head(http1.parse_response(raw, b"GET"), frozenset(), True),
        http1.forward_response_head(http1.parse_response(hop, b"GET"), frozenset(), False))
