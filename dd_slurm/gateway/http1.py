"""HTTP/1.1 message framing for the gateway (pure): heads, body framing, hop-by-hop headers.

Strict where framing is at stake (request smuggling): one Content-Length value, digits only; a
Transfer-Encoding other than `chunked`, or both headers at once, is refused; no obsolete line
folding; header names are tokens. Everything else passes through byte for byte. Bodies are
framed incrementally (`Counted`, `Chunks`): the relay passes on what arrives, never a whole body.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

CRLF = b"\r\n"
END = b"\r\n\r\n"
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade",
                        b"expect", b"host", b"proxy-authorization"})
FRAMING = frozenset({b"content-length", b"transfer-encoding"})
NOT_HOP_BY_HOP = FRAMING | {b"host"}  # a Connection header naming one of these is refused
NO_BODY = -1      # framing: no body at all
CHUNKED = -2      # framing: chunked transfer coding
UNTIL_CLOSE = -3  # framing: the body ends when the connection closes (responses only)
LINE_MAX = 1 << 14  # a chunk size line or trailer line longer than this is a framing error
REASONS = {200: b"OK", 400: b"Bad Request", 401: b"Unauthorized", 404: b"Not Found", 408: b"Request Timeout",
           413: b"Content Too Large", 417: b"Expectation Failed", 429: b"Too Many Requests",
           431: b"Request Header Fields Too Large", 501: b"Not Implemented", 502: b"Bad Gateway",
           503: b"Service Unavailable", 504: b"Gateway Timeout"}
# Field values: visible characters, obs-text, SP and HTAB; no other control character (NUL, CR,
# LF, VT, FF, DEL, ...). The request target: visible ASCII only (no SP, TAB, CR, LF, NUL, DEL).
VALUE_BYTES = rb"[\t\x20-\x7e\x80-\xff]*"
REQUEST_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([\x21-\x7e]+) (HTTP/1\.[01])\Z")
STATUS_LINE = re.compile(rb"(HTTP/1\.[01]) ([1-5][0-9][0-9])(?: (" + VALUE_BYTES + rb"))?\Z")
HEADER_LINE = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+:" + VALUE_BYTES + rb"\r\n"
HEADER_BLOCK = re.compile(rb"(?:" + HEADER_LINE + rb")*")  # every line: token ":" value CRLF
TRAILER_LINE = re.compile(HEADER_LINE + rb"\Z")
HEADER_NAME = re.compile(rb"([^:\r\n]*):[^\r\n]*\r\n")
CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;" + VALUE_BYTES + rb")?[ \t]*\r\n\Z")
BARE_LF_END = re.compile(rb"\n\r?\n")  # the end of a head written with bare LFs
CHUNK_MAX = 1 << 62


class BadMessage(Exception):
    """The peer sent something that cannot be framed; `status` is what a server answers."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Head:
    """One parsed head. `start` is the request or status line split in three; `names` the header
    names in lower case and `lines` the raw header lines, in order (`headers` pairs them); `length`
    is the body framing (>= 0: that many bytes); `close`: the sender wants the connection closed
    after this message; `raw` the head as received; `reframe`: None when the head's own framing
    header is canonical (one line, digits or `chunked`), else the one line that says the framing
    the gateway decided on (b"" for none), which replaces the head's own when it is forwarded.
    Not changed once made."""

    __slots__ = ("close", "length", "lines", "names", "raw", "reframe", "start")

    def __init__(self, start: tuple[bytes, bytes, bytes], names: list[bytes], lines: list[bytes], length: int,
                 close: bool, raw: bytes = b"", reframe: bytes | None = None) -> None:
        self.start, self.names, self.lines, self.length, self.close, self.raw = start, names, lines, length, close, raw
        self.reframe = reframe

    @property
    def headers(self) -> tuple[tuple[bytes, bytes], ...]:
        """(lower-case name, raw line) pairs, in order."""
        return tuple(zip(self.names, self.lines))

    def consumed(self) -> Head:
        """The same head, as if its body had been read already (length 0; its framing is forwarded as it was)."""
        return Head(self.start, self.names, self.lines, 0, self.close, self.raw, self.reframe)

    def value(self, name: bytes) -> bytes | None:
        """The value of the first header called `name` (lower case), None without one."""
        if name not in self.names:
            return None
        return self.lines[self.names.index(name)].partition(b":")[2].strip(b" \t")

    def __repr__(self) -> str:
        return f"Head({self.start!r}, {len(self.names)} headers, length={self.length}, close={self.close})"


def parse_headers(block: bytes) -> tuple[list[bytes], list[bytes]]:
    """(lower-case names, raw lines) of a block of header lines, each ending in CRLF."""
    if not HEADER_BLOCK.fullmatch(block):
        for line in block.split(CRLF)[:-1]:
            if line[:1] in (b" ", b"\t"):
                raise BadMessage(400, "obsolete line folding")
            name, colon, value = line.partition(b":")
            if not colon or not TOKEN.match(name):
                raise BadMessage(400, f"malformed header line {line[:40]!r}")
            if not re.fullmatch(VALUE_BYTES, value):
                raise BadMessage(400, f"control character in the value of header {name[:40]!r}")
        raise BadMessage(400, "malformed header block (a bare CR or LF)")
    lines = block.split(CRLF)
    lines.pop()  # after the last CRLF
    return HEADER_NAME.findall(block.lower()), lines


def _values(names: list[bytes], lines: list[bytes], name: bytes) -> list[bytes] | None:
    """Every value of the headers called `name`, None without one."""
    count = names.count(name)
    if not count:
        return None
    if count == 1:
        return [lines[names.index(name)].partition(b":")[2].strip(b" \t")]
    return [line.partition(b":")[2].strip(b" \t") for n, line in zip(names, lines) if n == name]


def _framing(names: list[bytes], lines: list[bytes]) -> tuple[int | None, bool]:
    """The body framing the headers declare (None when they declare none), and whether it is
    declared canonically (by one header whose value is the framing itself)."""
    if b"transfer-encoding" in names:
        if b"content-length" in names:
            raise BadMessage(400, "both Transfer-Encoding and Content-Length")
        values = _values(names, lines, b"transfer-encoding") or []
        if b",".join(values).strip(b" \t").lower() != b"chunked":
            raise BadMessage(501, "only the chunked transfer coding is supported")
        return CHUNKED, len(values) == 1
    if b"content-length" not in names:
        return None, True
    cl = _values(names, lines, b"content-length") or []
    text = cl[0]
    canonical = len(cl) == 1 and b"," not in text
    if not canonical:
        found = {v.strip(b" \t") for item in cl for v in item.split(b",")}
        if len(found) != 1:
            raise BadMessage(400, "conflicting Content-Length values")
        text = found.pop()
    if not text.isdigit() or len(text) > 18:
        raise BadMessage(400, "invalid Content-Length")
    return int(text), canonical


def _reframing(length: int | None, canonical: bool) -> bytes | None:
    if canonical:
        return None
    return b"transfer-encoding: chunked" if length == CHUNKED else b"content-length: %d" % (length or 0)


def _connection_tokens(names: list[bytes], lines: list[bytes]) -> frozenset[bytes]:
    return frozenset(t.strip(b" \t").lower() for v in _values(names, lines, b"connection") or ()
                     for t in v.split(b","))


def _wants_close(names: list[bytes], lines: list[bytes], version: bytes, status: int) -> bool:
    """HTTP/1.1 keeps the connection unless `Connection: close`; HTTP/1.0 never does (its
    `keep-alive` extension is not honoured)."""
    if b"connection" not in names:
        return version != b"HTTP/1.1"
    tokens = _connection_tokens(names, lines)
    if not tokens.isdisjoint(NOT_HOP_BY_HOP):
        raise BadMessage(status, "Connection names a header that frames the message or routes it")
    return version != b"HTTP/1.1" or b"close" in tokens


def _split(data: bytes) -> tuple[bytes, bytes]:
    """(start line, header block: lines each ending in CRLF) of a head that ends in CRLF CRLF."""
    if not data.endswith(END):
        data = data.rstrip(b"\r\n") + END
    first = data.find(CRLF)
    return data[:first], data[first + 2:-2]


def _check_host(names: list[bytes], version: bytes) -> None:
    count = names.count(b"host")
    if count > 1 or (count == 0 and version == b"HTTP/1.1"):
        raise BadMessage(400, "an HTTP/1.1 request needs exactly one Host header")


def parse_request(data: bytes) -> Head:
    """A request head (ending in CRLF CRLF). Requests without a declared body have none."""
    first, block = _split(data)
    line = REQUEST_LINE.match(first)
    if line is None:
        raise BadMessage(400, f"malformed request line {first[:60]!r}")
    method, target, version = line.groups()
    names, lines = parse_headers(block)
    length, canonical = _framing(names, lines)
    _check_host(names, version)
    return Head((method, target, version), names, lines, 0 if length is None else length,
                _wants_close(names, lines, version, 400), data, _reframing(length, canonical))


def parse_response(data: bytes, method: bytes) -> Head:
    first, block = _split(data)
    line = STATUS_LINE.match(first)
    if line is None or line.group(2) == b"101":
        raise BadMessage(502, f"malformed status line {first[:60]!r}")
    version, code, reason = line.groups()
    status = int(code)
    names, lines = parse_headers(block)
    length, canonical = _framing(names, lines)
    if method == b"HEAD" or status < 200 or status in (204, 304):
        length, canonical = NO_BODY, True
    elif length is None:
        length = UNTIL_CLOSE
    close = _wants_close(names, lines, version, 502) or length == UNTIL_CLOSE
    return Head((version, code, reason or b""), names, lines, length, close, data, _reframing(length, canonical))


def connection_listed(head: Head) -> frozenset[bytes]:
    """Header names the Connection header declares hop-by-hop (never a framing header: parsing refused those)."""
    return _connection_tokens(head.names, head.lines) - NOT_HOP_BY_HOP


def forward_lines(head: Head, drop: frozenset[bytes] = frozenset()) -> list[bytes]:
    """The head's header lines minus hop-by-hop ones (and `drop`). The framing they carry is the
    one the gateway decided on: the head's own line when canonical, else `reframe` in its place."""
    skip = HOP_BY_HOP | drop
    if b"connection" in head.names:
        skip |= connection_listed(head)
    if head.reframe is not None:
        skip |= FRAMING
    if skip.isdisjoint(head.names):
        return head.lines
    lines = [line for name, line in zip(head.names, head.lines) if name not in skip]
    if head.reframe and drop.isdisjoint(FRAMING):
        lines.append(head.reframe)
    return lines


def forward_response_head(head: Head, drop: frozenset[bytes], close: bool) -> bytes:
    """The response head to relay: HTTP/1.1, minus hop-by-hop headers (and `drop`), with
    `connection: close` when `close`. The head as received when that is all it already is."""
    if head.start[0] == b"HTTP/1.1" and not drop and head.reframe is None and HOP_BY_HOP.isdisjoint(head.names) \
            and head.raw:
        return head.raw[:-2] + b"connection: close\r\n\r\n" if close else head.raw
    lines = [b"HTTP/1.1 " + head.start[1] + b" " + head.start[2], *forward_lines(head, drop)]
    if close:
        lines.append(b"connection: close")
    return CRLF.join(lines) + END


def status_of(head: Head) -> int:
    return int(head.start[1])


def chunk_size(line: bytes) -> int:
    """The size of a chunk from its size line, CRLF included (extensions allowed, ignored): hex
    digits right at its start, no control character, no bare CR or LF."""
    match = CHUNK_LINE.match(line)
    if match is None or int(match.group(1), 16) > CHUNK_MAX:
        raise BadMessage(400, f"malformed chunk size line {line[:40]!r}")
    return int(match.group(1), 16)


def simple_response(status: int, body: bytes, extra: Sequence[bytes] = (), close: bool = False,
                    content_type: bytes = b"application/json") -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (status, REASONS.get(status, b"Error")), b"content-type: " + content_type,
             b"content-length: %d" % len(body), *extra]
    if close:
        lines.append(b"connection: close")
    return CRLF.join(lines) + END + body


class Counted:
    """A body of `left` bytes, fed as it arrives."""

    __slots__ = ("left",)

    def __init__(self, length: int) -> None:
        self.left = length

    def feed(self, data: bytes) -> tuple[list[bytes], bytes | None]:
        """The bytes of the body in `data`, and once it is complete the bytes after it (else None)."""
        if len(data) < self.left:
            self.left -= len(data)
            return [data], None
        piece, rest, self.left = data[:self.left], data[self.left:], 0
        return [piece], rest


SIZE, DATA, DATA_END, TRAILER, DONE = 0, 1, 2, 3, 4


class Chunks:
    """A chunked body, fed as it arrives: what comes out is every byte consumed, framing included
    (or, with `dechunk`, the chunks' data alone), as soon as it arrived, so a chunk is never held
    back for the next one. Raises BadMessage(400) on bad framing."""

    __slots__ = ("buffer", "dechunk", "need", "state")

    def __init__(self, dechunk: bool = False) -> None:
        self.buffer = b""  # an incomplete line or chunk-ending CRLF
        self.dechunk = dechunk
        self.state, self.need = SIZE, 0

    def feed(self, data: bytes) -> tuple[list[bytes], bytes | None]:
        """Bytes to pass on, and once the body ended the bytes after it (else None)."""
        buf = self.buffer + data if self.buffer else data
        pieces: list[bytes] = []  # dechunked data
        pos, size = 0, len(buf)
        while pos < size:
            if self.state == DATA:
                take = min(self.need, size - pos)
                pieces.append(buf[pos:pos + take])
                pos, self.need = pos + take, self.need - take
                if not self.need:
                    self.state = DATA_END
            elif self.state == DATA_END:
                if size - pos < 2:
                    break
                if buf[pos:pos + 2] != CRLF:
                    raise BadMessage(400, "chunk not followed by CRLF")
                pos, self.state = pos + 2, SIZE
            else:
                end = self._line(buf, pos)
                if end < 0:
                    break
                pos = end
                if self.state == DONE:
                    self.buffer = b""
                    return (pieces if self.dechunk else [buf[:pos]]), buf[pos:]
        self.buffer = buf[pos:]
        return (pieces if self.dechunk else [buf[:pos]] if pos else []), None

    def _line(self, buf: bytes, pos: int) -> int:
        """A chunk size line or trailer line at `pos`: where the next thing starts, -1 until complete."""
        end = buf.find(CRLF, pos)
        if end < 0:
            if len(buf) - pos > LINE_MAX:
                raise BadMessage(400, "chunk line too long")
            return -1
        if self.state == TRAILER:
            if end == pos:  # the empty line ending the trailer
                self.state = DONE
            elif not TRAILER_LINE.match(buf, pos, end + 2):
                raise BadMessage(400, f"malformed trailer line {buf[pos:pos + 40]!r}")
        else:
            self.need = chunk_size(buf[pos:end + 2])
            self.state = DATA if self.need else TRAILER
        return end + 2
