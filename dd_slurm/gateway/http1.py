"""HTTP/1.1 message framing for the gateway (pure): heads, body framing, hop-by-hop headers.

Strict where framing is at stake (request smuggling): one Content-Length value, digits only; a
Transfer-Encoding other than `chunked`, or both headers at once, is refused; no obsolete line
folding; header names are tokens. Everything else passes through byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

CRLF = b"\r\n"
END = b"\r\n\r\n"
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade",
                        b"expect", b"host", b"proxy-authorization"})
NO_BODY = -1      # framing: no body at all
CHUNKED = -2      # framing: chunked transfer coding
UNTIL_CLOSE = -3  # framing: the body ends when the connection closes (responses only)
REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found", 413: b"Content Too Large",
           429: b"Too Many Requests", 431: b"Request Header Fields Too Large", 501: b"Not Implemented",
           502: b"Bad Gateway", 503: b"Service Unavailable", 504: b"Gateway Timeout"}


class BadMessage(Exception):
    """The peer sent something that cannot be framed; `status` is what a server answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@attrs.frozen
class Head:
    """One parsed head. `start` is the request or status line split in three; `headers` keeps
    (lower-case name, raw line) pairs in order; `length` is the body framing (>= 0: that many bytes)."""

    start: tuple[bytes, bytes, bytes]
    headers: tuple[tuple[bytes, bytes], ...]
    length: int
    close: bool  # the sender wants the connection closed after this message


def parse_headers(lines: list[bytes]) -> tuple[tuple[tuple[bytes, bytes], ...], dict[bytes, list[bytes]]]:
    pairs = []
    values: dict[bytes, list[bytes]] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not TOKEN.match(name):
            raise BadMessage(400, f"malformed header line {line[:40]!r}")
        lower = name.lower()
        pairs.append((lower, line))
        values.setdefault(lower, []).append(value.strip(b" \t"))
    return tuple(pairs), values


def _framing(values: dict[bytes, list[bytes]]) -> int | None:
    """The body framing the headers declare, or None when they declare none."""
    te = values.get(b"transfer-encoding")
    cl = values.get(b"content-length")
    if te is not None:
        if cl is not None:
            raise BadMessage(400, "both Transfer-Encoding and Content-Length")
        if b",".join(te).strip().lower() != b"chunked":
            raise BadMessage(501, "only the chunked transfer coding is supported")
        return CHUNKED
    if cl is None:
        return None
    found = {v for item in cl for v in item.split(b",")}
    if len(found) != 1:
        raise BadMessage(400, "conflicting Content-Length values")
    text = found.pop().strip()
    if not text.isdigit() or len(text) > 18:
        raise BadMessage(400, "invalid Content-Length")
    return int(text)


def _wants_close(values: dict[bytes, list[bytes]], version: bytes) -> bool:
    tokens = {t.strip().lower() for v in values.get(b"connection", ()) for t in v.split(b",")}
    if version == b"HTTP/1.1":
        return b"close" in tokens
    return b"keep-alive" not in tokens


def _split(data: bytes) -> tuple[bytes, list[bytes]]:
    if data.endswith(END):
        data = data[:-4]
    lines = data.split(CRLF)
    if any(line[:1] in (b" ", b"\t") for line in lines[1:]):
        raise BadMessage(400, "obsolete line folding")
    return lines[0], lines[1:]


def parse_request(data: bytes) -> Head:
    """A request head (ending in CRLF CRLF). Requests without a declared body have none."""
    first, lines = _split(data)
    parts = first.split(b" ")
    if len(parts) != 3 or not parts[1] or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0") or not TOKEN.match(parts[0]):
        raise BadMessage(400, f"malformed request line {first[:60]!r}")
    headers, values = parse_headers(lines)
    length = _framing(values)
    return Head((parts[0], parts[1], parts[2]), headers, 0 if length is None else length,
                _wants_close(values, parts[2]))


def parse_response(data: bytes, method: bytes) -> Head:
    first, lines = _split(data)
    parts = first.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
        raise BadMessage(502, f"malformed status line {first[:60]!r}")
    status = int(parts[1])
    headers, values = parse_headers(lines)
    length = _framing(values)
    if method == b"HEAD" or status < 200 or status in (204, 304):
        length = NO_BODY
    elif length is None:
        length = UNTIL_CLOSE
    close = _wants_close(values, parts[0]) or length == UNTIL_CLOSE
    return Head((parts[0], parts[1], parts[2] if len(parts) > 2 else b""), headers, length, close)


def connection_listed(head: Head) -> frozenset[bytes]:
    """Header names the Connection header declares hop-by-hop."""
    return frozenset(t.strip().lower() for name, line in head.headers if name == b"connection"
                     for t in line.partition(b":")[2].split(b","))


def forward_lines(head: Head, drop: frozenset[bytes] = frozenset()) -> list[bytes]:
    """The head's header lines minus hop-by-hop ones (and `drop`)."""
    listed = connection_listed(head) if any(name == b"connection" for name, _ in head.headers) else frozenset()
    return [line for name, line in head.headers if name not in HOP_BY_HOP and name not in listed and name not in drop]


def status_of(head: Head) -> int:
    return int(head.start[1])


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line (extensions allowed, ignored)."""
    text = line.split(b";", 1)[0].strip()
    if not text or len(text) > 16 or any(c not in b"0123456789abcdefABCDEF" for c in text):
        raise BadMessage(502, f"malformed chunk size line {line[:40]!r}")
    return int(text, 16)


def simple_response(status: int, body: bytes, extra: Sequence[bytes] = (), close: bool = False,
                    content_type: bytes = b"application/json") -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (status, REASONS.get(status, b"Error")), b"content-type: " + content_type,
             b"content-length: %d" % len(body), *extra]
    if close:
        lines.append(b"connection: close")
    return CRLF.join(lines) + END + body
