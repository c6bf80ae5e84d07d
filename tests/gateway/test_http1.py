"""HTTP/1.1 framing (pure): heads parse to what they say, framing is strict, hop-by-hop is dropped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.gateway import http1
from dd_slurm.gateway.http1 import CHUNKED, NO_BODY, UNTIL_CLOSE, BadMessage

pytestmark = pytest.mark.timeout(60)

names = st.from_regex(r"[A-Za-z][A-Za-z0-9-]{0,15}", fullmatch=True).filter(
    lambda n: n.lower() not in {"content-length", "transfer-encoding", "connection"})
values = st.from_regex(r"[!-~]([ !-~]{0,30}[!-~])?", fullmatch=True)


@given(st.sampled_from([b"GET", b"POST", b"DELETE"]), st.from_regex(rb"/[a-z0-9/._-]{0,30}", fullmatch=True),
       st.lists(st.tuples(names, values), max_size=8), st.integers(0, 10**12))
def test_request_heads_parse_to_what_they_say(method, target, headers, length) -> None:
    """Any well-formed head: the request line, every header line in order, the Content-Length."""
    lines = [f"{n}: {v}".encode() for n, v in headers] + [b"Content-Length: %d" % length]
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
