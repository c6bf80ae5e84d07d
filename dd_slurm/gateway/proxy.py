"""The proxy: `/<alias>/...` on a keep-alive client connection -> `/...` on a replica of the alias.

Headers and bodies pass through unchanged but for Host and connection-level headers; response
bodies are relayed as they arrive (chunked ones chunk by chunk), never buffered whole (see
exchange.py for the relay and the rule that a request is written to one replica only).

Built on asyncio protocols, not streams: a request whose body came with its head, to a replica
with a pooled connection, goes through callbacks alone (no task, no future), which is most of
what the gateway's CPU per request is.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Callable
from typing import Any

import attrs

from dd_slurm.gateway import http1
from dd_slurm.gateway.exchange import SENT, Exchange, error_body
from dd_slurm.gateway.http1 import BARE_LF_END, END, BadMessage, Head
from dd_slurm.gateway.pool import READ_LIMIT, AliasPool, Reading

PREREAD_MAX = 1 << 20  # request bodies up to this size are read before a replica is chosen
HIGH_WATER = 1 << 18  # a client that reads slower than the replica writes: relaying pauses here
BUFFER_MAX = PREREAD_MAX + READ_LIMIT  # a client's unparsed bytes beyond this: stop reading it for now
STATS_PATH = b"/_gateway/stats"  # aliases start with [A-Za-z0-9]: no clash
METRICS_PATH = b"/metrics"  # Prometheus's conventional path; answered before any alias
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
FULL = http1.simple_response(503, error_body("the gateway is at its connection limit; retry later", "api_error",
                                             "too_many_connections"), (b"retry-after: 1",), close=True)
DRAINING = http1.simple_response(503, error_body("the attempt is stopping: the gateway admits no new request", "api_error",
                                                 "draining"), (b"retry-after: 30",), close=True)


@attrs.frozen
class Limits:
    """How long a client may take and how many may be connected at once."""

    header_timeout_s: float = 10.0  # from a head's first byte to its end
    idle_timeout_s: float = 120.0  # a keep-alive connection with nothing to do; a request body that stops coming
    max_connections: int = 4096  # client connections; the one beyond is answered 503 and closed at once

    @property
    def tick_s(self) -> float:
        return max(0.01, min(1.0, self.header_timeout_s / 4, self.idle_timeout_s / 4))


class Proxy:
    """What every client connection shares; `connection()` makes one (the server's protocol factory)."""

    def __init__(self, pools: dict[str, AliasPool], api_key: str | None, retry_after_s: int,
                 connect_timeout_s: float, now: Callable[[], float], stats: Callable[[], dict],
                 limits: Limits = Limits()) -> None:
        self.pools = {alias.encode(): pool for alias, pool in pools.items()}
        self.auth = b"Bearer " + api_key.encode() if api_key else None
        self.retry_after = b"retry-after: %d" % retry_after_s
        self.connect_timeout_s, self.now, self.stats, self.limits = connect_timeout_s, now, stats, limits
        self.connections: set[ClientConnection] = set()
        self.counts = {"refused_at_limit": 0, "header_timeout": 0, "idle_timeout": 0, "refused_draining": 0}
        self.draining = False  # set at the attempt's stop: new requests are answered 503, in-flight ones finish

    def in_flight(self) -> int:
        """Requests admitted and not yet answered: at replicas, or queued for one."""
        return sum(sum(r.inflight for r in pool.replicas) + len(pool.waiters) for pool in self.pools.values())

    def connection(self) -> ClientConnection:
        return ClientConnection(self)

    def authorized(self, head: Head) -> bool:
        if self.auth is None:
            return True
        given = head.value(b"authorization")
        return given is not None and hmac.compare_digest(given, self.auth)

    def sweep(self) -> None:
        """Close the connections past their header or idle timeout."""
        now = self.now()
        for conn in [c for c in self.connections if c.exchange is None or c.streaming is not None]:
            conn.check_timeouts(now)

    async def sweeping(self) -> None:
        while True:
            await asyncio.sleep(self.limits.tick_s)
            self.sweep()


class ClientConnection(Reading):
    """One client connection (an asyncio protocol): requests in turn, one exchange at a time; bytes
    that arrive meanwhile (a pipelined request) wait in the buffer, which grows in place (a head
    sent in small pieces costs what it would cost whole: each byte is appended and scanned once)."""

    __slots__ = ("active_at", "buffer", "closed", "eof", "exchange", "head", "head_at", "in_loop", "proxy",
                 "read_paused", "scanned", "streaming", "transport", "write_paused")

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.transport: Any = None
        self.buffer = bytearray()
        self.scanned = 0  # bytes of the buffer already searched for the end of a head
        self.head: Head | None = None  # parsed, waiting for its body
        self.exchange: Exchange | None = None
        self.streaming: Exchange | None = None  # the exchange that takes the bytes that arrive (a request body)
        self.closed = self.eof = self.in_loop = self.read_paused = self.write_paused = False
        self.active_at = proxy.now()  # the last sign of life: accepted, a response finished, a body byte
        self.head_at = 0.0  # when the first byte of an incomplete head arrived (0: none pending)

    # -- asyncio.Protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        proxy = self.proxy
        if len(proxy.connections) >= proxy.limits.max_connections:
            proxy.counts["refused_at_limit"] += 1
            transport.write(FULL)
            self.close()
            return
        proxy.connections.add(self)
        transport.set_write_buffer_limits(HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        if self.streaming is not None:
            self.active_at = self.proxy.now()
            self.streaming.client_data(data)
            return
        self.buffer += data
        if self.exchange is None:
            self._serve()
        elif len(self.buffer) > BUFFER_MAX and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        """The client closed its side: a request in flight is abandoned (never a half-close:
        a model server stops generating for a client that went away), the connection closes."""
        self.eof = True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.proxy.connections.discard(self)
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
        self.active_at = self.proxy.now()
        data = bytes(self.buffer)
        self.buffer.clear()
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        if data:
            exchange.client_data(data)

    def unread(self, rest: bytes) -> None:
        """The request body ended; `rest` came after it."""
        self.streaming = None
        self.buffer[:0] = rest

    def finished(self, keep: bool) -> None:
        """The exchange is over; `keep`: the connection can carry the next request."""
        self.exchange = self.streaming = None
        if not keep or self.closed or (self.eof and not self.buffer):
            self.close()
            return
        self.active_at = self.proxy.now()
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        if not self.in_loop:
            self._serve()

    def close(self) -> None:
        self.closed = True
        self.proxy.connections.discard(self)
        self.transport.close()

    def check_timeouts(self, now: float) -> None:
        """Close the connection when its head is late, or nothing came for the idle timeout (between
        requests, or in the middle of a request body)."""
        limits, counts = self.proxy.limits, self.proxy.counts
        if self.head_at and now - self.head_at >= limits.header_timeout_s:
            counts["header_timeout"] += 1
            self.refuse(408, f"the request head was not complete within {limits.header_timeout_s:g} s",
                        "header_timeout")
        elif not self.head_at and now - self.active_at >= limits.idle_timeout_s:
            counts["idle_timeout"] += 1
            if self.streaming is not None:
                self.streaming.client_gave_up()
            self.close()

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
            head = self._next_head()
            if head is None or not self._admit(head):
                return None
            self.head = head
        if not 0 <= head.length <= PREREAD_MAX:
            self.head = None
            return head, None, self.proxy.now()
        if len(self.buffer) < head.length:
            self.active_at = self.proxy.now()
            return None
        body = bytes(self.buffer[:head.length])
        del self.buffer[:head.length]
        self.head = None
        return head.consumed(), body, self.proxy.now()

    def _next_head(self) -> Head | None:
        """The next request head once it is complete in the buffer (None until then, or refused)."""
        buffer = self.buffer
        end = buffer.find(END, max(0, self.scanned - 3))
        if end < 0 or end > READ_LIMIT:
            if len(buffer) > READ_LIMIT:
                self.refuse(431, "request head too large", "head_too_large")
            elif BARE_LF_END.search(buffer, max(0, self.scanned - 2)):
                self.refuse(400, "a head ends in bare LF line endings (CRLF required)", "bad_request")
            elif buffer:
                self.scanned = len(buffer)
                self.head_at = self.head_at or self.proxy.now()
            return None
        raw = bytes(buffer[:end + 4])
        del buffer[:end + 4]
        self.scanned, self.head_at = 0, 0.0
        try:
            return http1.parse_request(raw)
        except BadMessage as err:
            self.refuse(err.status, str(err), "bad_request")
            return None

    def _admit(self, head: Head) -> bool:
        """The key is checked once the head is complete, before any byte of the body is read or a
        `100 Continue` sent; a key-less request is answered 401 and its connection closed."""
        if not self.proxy.authorized(head):
            self._count_refusal(head, 401)
            self.refuse(401, "missing or wrong API key (Authorization: Bearer ...)", "invalid_api_key")
            return False
        expect = head.value(b"expect")
        if expect is not None:
            if expect.lower() != b"100-continue":
                self.refuse(417, "the only expectation answered is 100-continue", "expectation_failed")
                return False
            if head.length != 0:
                self.transport.write(CONTINUE)
        return True

    def _count_refusal(self, head: Head, status: int) -> None:
        pool = self._pool_of(head.start[1])
        if pool is not None:
            pool.stats.requests += 1
            pool.stats.respond(status, 0.0)

    def _pool_of(self, target: bytes) -> AliasPool | None:
        return self.proxy.pools.get(target[1:].split(b"/", 1)[0]) if target[:1] == b"/" else None

    def refuse(self, status: int, message: str, code: str) -> None:
        """Answer with an error of the gateway's own and close."""
        self.transport.write(http1.simple_response(status, error_body(message, "invalid_request_error", code),
                                                   close=True))
        self.close()

    def _dispatch(self, head: Head, body: bytes | None, start: float) -> None:
        target = head.start[1]
        if target == METRICS_PATH and head.start[0] == b"GET":  # before the aliases: one may be named `metrics`
            self._metrics(head)
            return
        pool = self._pool_of(target)
        if pool is None:
            self._local(head, target)
            return
        if self.proxy.draining:  # counted apart: not an answer of the alias's, nor a latency
            self.proxy.counts["refused_draining"] += 1
            self.transport.write(DRAINING)
            self.close()
            return
        pool.stats.requests += 1
        alias_length = len(pool.alias.encode())
        self.exchange = Exchange(self, head, body, pool, target[alias_length + 1:] or b"/", start)
        self.exchange.begin()

    def _metrics(self, head: Head) -> None:
        from dd_slurm.gateway.metrics import CONTENT_TYPE, exposition

        keep = head.length == 0 and not head.close
        body = exposition(self.proxy.pools.values(), self.proxy.counts["refused_draining"])
        self.transport.write(http1.simple_response(200, body, close=not keep, content_type=CONTENT_TYPE))
        if not keep:
            self.close()

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
