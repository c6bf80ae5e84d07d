"""The proxy: `/<alias>/...` on a keep-alive client connection -> `/...` on a replica of the alias.

Headers and bodies pass through unchanged but for Host and connection-level headers; response
bodies are relayed as they arrive (chunked ones chunk by chunk), never buffered whole (see
exchange.py for the relay and the rule that a request is written to one replica only).

Built on asyncio protocols, not streams: a request whose body came with its head, to a replica
with a pooled connection, goes through callbacks alone (no task, no future), which is most of
what the gateway's CPU per request is.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Callable
from typing import Any

from dd_slurm.gateway import http1
from dd_slurm.gateway.exchange import SENT, Exchange, error_body
from dd_slurm.gateway.http1 import END, BadMessage, Head
from dd_slurm.gateway.pool import READ_LIMIT, AliasPool, Reading

PREREAD_MAX = 1 << 20  # request bodies up to this size are read before a replica is chosen
HIGH_WATER = 1 << 18  # a client that reads slower than the replica writes: relaying pauses here
BUFFER_MAX = PREREAD_MAX + READ_LIMIT  # a client's unparsed bytes beyond this: stop reading it for now
STATS_PATH = b"/_gateway/stats"  # aliases start with [A-Za-z0-9]: no clash
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Proxy:
    """What every client connection shares; `connection()` makes one (the server's protocol factory)."""

    def __init__(self, pools: dict[str, AliasPool], api_key: str | None, retry_after_s: int,
                 connect_timeout_s: float, now: Callable[[], float], stats: Callable[[], dict]) -> None:
        self.pools = {alias.encode(): pool for alias, pool in pools.items()}
        self.auth = b"Bearer " + api_key.encode() if api_key else None
        self.retry_after = b"retry-after: %d" % retry_after_s
        self.connect_timeout_s, self.now, self.stats = connect_timeout_s, now, stats

    def connection(self) -> ClientConnection:
        return ClientConnection(self)

    def authorized(self, head: Head) -> bool:
        if self.auth is None:
            return True
        given = head.value(b"authorization")
        return given is not None and hmac.compare_digest(given, self.auth)


class ClientConnection(Reading):
    """One client connection (an asyncio protocol): requests in turn, one exchange at a time; bytes
    that arrive meanwhile (a pipelined request) wait in the buffer."""

    __slots__ = ("buffer", "closed", "eof", "exchange", "head", "in_loop", "proxy", "read_paused", "streaming",
                 "transport", "write_paused")

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.transport: Any = None
        self.buffer = b""
        self.head: Head | None = None  # parsed, waiting for its body
        self.exchange: Exchange | None = None
        self.streaming: Exchange | None = None  # the exchange that takes the bytes that arrive (a request body)
        self.closed = self.eof = self.in_loop = self.read_paused = self.write_paused = False

    # -- asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        if self.streaming is not None:
            self.streaming.client_data(data)
            return
        self.buffer = self.buffer + data if self.buffer else data
        if self.exchange is None:
            self._serve()
        elif len(self.buffer) > BUFFER_MAX and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        exchange = self.exchange
        if exchange is None or exchange.state != SENT or self.streaming is not None:  # not waiting for a response: done
            return False
        return True  # half-closed: the response can still be written

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.client_lost()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self.exchange is not None and self.exchange.state == SENT:
            self.exchange.conn.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.exchange is not None and self.exchange.state == SENT:
            self.exchange.conn.transport.resume_reading()

    # -- what the exchange calls

    def stream_to(self, exchange: Exchange) -> None:
        """From now on bytes from the client are the request body: those buffered first."""
        self.streaming = exchange
        data, self.buffer = self.buffer, b""
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        if data:
            exchange.client_data(data)

    def unread(self, rest: bytes) -> None:
        """The request body ended; `rest` came after it."""
        self.streaming = None
        self.buffer = rest + self.buffer

    def finished(self, keep: bool) -> None:
        """The exchange is over; `keep`: the connection can carry the next request."""
        self.exchange = self.streaming = None
        if not keep or self.closed or (self.eof and not self.buffer):
            self.close()
            return
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        if not self.in_loop:
            self._serve()

    def close(self) -> None:
        self.closed = True
        self.transport.close()

    # -- requests

    def _serve(self) -> None:
        """Every complete request in the buffer, in turn, until one has to wait."""
        self.in_loop = True
        try:
            while self.exchange is None and not self.closed:
                request = self._take()
                if request is None:
                    if self.eof:
                        self.close()
                    return
                self._dispatch(*request)
        finally:
            self.in_loop = False

    def _take(self) -> tuple[Head, bytes | None, float] | None:
        """The next request (head, body or None for a relayed one, start time), None until complete."""
        head = self.head
        if head is None:
            end = self.buffer.find(END)
            if end < 0 or end > READ_LIMIT:
                if len(self.buffer) > READ_LIMIT:
                    self._error(431, "request head too large", "head_too_large")
                return None
            try:
                head = http1.parse_request(self.buffer[:end + 4])
            except BadMessage as err:
                self._error(err.status, str(err), "bad_request")
                return None
            self.buffer = self.buffer[end + 4:]
            if head.length != 0 and b"expect" in head.names:
                self.transport.write(CONTINUE)
            self.head = head
        if not 0 <= head.length <= PREREAD_MAX:
            self.head = None
            return head, None, self.proxy.now()
        if len(self.buffer) < head.length:
            return None
        body, self.buffer = self.buffer[:head.length], self.buffer[head.length:]
        self.head = None
        return head.consumed(), body, self.proxy.now()

    def _error(self, status: int, message: str, code: str) -> None:
        self.transport.write(http1.simple_response(status, error_body(message, "invalid_request_error", code),
                                                   close=True))
        self.close()

    def _dispatch(self, head: Head, body: bytes | None, start: float) -> None:
        target = head.start[1]
        alias = target[1:].split(b"/", 1)[0]
        pool = self.proxy.pools.get(alias) if target[:1] == b"/" else None
        if pool is None:
            self._local(head, target)
            return
        pool.stats.requests += 1
        self.exchange = Exchange(self, head, body, pool, target[len(alias) + 1:] or b"/", start)
        if not self.proxy.authorized(head):
            self.exchange.answer(401, error_body("missing or wrong API key (Authorization: Bearer ...)",
                                                "invalid_request_error", "invalid_api_key"))
        else:
            self.exchange.begin()

    def _local(self, head: Head, target: bytes) -> None:
        keep = head.length == 0 and not head.close
        if target == STATS_PATH and head.start[0] == b"GET":
            self.transport.write(http1.simple_response(200, json.dumps(self.proxy.stats()).encode(), close=not keep))
        else:
            known = ", ".join(sorted(a.decode() for a in self.proxy.pools))
            self.transport.write(http1.simple_response(404, error_body(
                f"no model alias in {target[:80].decode(errors='replace')!r}; paths are /ALIAS/v1/..., "
                f"aliases: {known}", "invalid_request_error", "model_not_found"), close=not keep))
        if not keep:
            self.close()
