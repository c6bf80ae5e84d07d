"""One request on its way through the gateway: a replica slot (now, or after a wait in the alias's
queue), a connection (pooled, or new), the request written once, the response relayed as it
arrives. Driven by the two connections' callbacks; only a new connection is a coroutine.

A failed connect moves the request to another replica; once a byte of it was written to a
replica it is never written again: a replica that closes or breaks before its response head
answers 502, one that breaks in the middle of its response closes the client connection.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dd_slurm.gateway import http1
from dd_slurm.gateway.http1 import CHUNKED, CRLF, END, NO_BODY, UNTIL_CLOSE, BadMessage, Chunks, Counted, Head
from dd_slurm.gateway.pool import READ_LIMIT, AliasPool, Rejected, Replica, Upstream, Waiter

CONNECT_ERRORS = (OSError, asyncio.TimeoutError)
CHOOSING, QUEUED, CONNECTING, SENT, DONE = range(5)


def error_body(message: str, kind: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


class Exchange:
    """`client` is the client connection (proxy.ClientConnection); `body` the request body when it
    was read already (None: relayed from the client connection as it arrives)."""

    __slots__ = ("body", "client", "conn", "excluded", "framing", "head", "leftover", "path", "pool", "replica",
                 "request_body", "reusable", "start", "state", "status", "task", "to_close", "upstream_close",
                 "waiter")
    replica: Replica  # set once a slot is taken
    conn: Upstream  # set once the request is sent
    waiter: Waiter  # set while queued

    def __init__(self, client: Any, head: Head, body: bytes | None, pool: AliasPool, path: bytes,
                 start: float) -> None:
        self.client, self.head, self.body, self.pool, self.path, self.start = client, head, body, pool, path, start
        self.state = CHOOSING
        self.excluded: frozenset[int] = frozenset()
        self.task: asyncio.Future | None = None
        self.request_body: Counted | Chunks | None = None  # a request body still being relayed
        self.status = 0  # the response's, once its head came
        self.upstream_close = False  # the replica closes the connection after the response
        self.framing: Counted | Chunks | None = None  # the response body's; None: until the replica closes
        self.leftover = b""  # the start of a response head
        self.reusable = True
        self.to_close = False

    # -- a replica slot and a connection

    def begin(self) -> None:
        replica = self.pool.take(self.excluded)
        if replica is not None:
            self._use(replica)
            return
        try:
            self.waiter = self.pool.enqueue(self.excluded)
        except Rejected as rejected:
            self._reject(rejected)
            return
        self.state = QUEUED
        self.waiter.future.add_done_callback(self._granted)

    def _granted(self, future: asyncio.Future) -> None:
        if self.state != QUEUED or future.cancelled():  # the client left: the pool took the slot back
            return
        error = future.exception()
        if isinstance(error, Rejected):
            self._reject(error)
        elif error is None:
            self._use(future.result())

    def _reject(self, rejected: Rejected) -> None:
        self.answer(429, error_body(
            f"model alias {self.pool.alias!r} is at capacity ({rejected.code.replace('_', ' ')}); retry later",
            "rate_limit_error", rejected.code), (self.client.proxy.retry_after,))

    def _use(self, replica: Replica) -> None:
        self.replica = replica
        conn = replica.take_idle(self.client.proxy.now())
        if conn is not None:
            self._send(conn)
            return
        self.state = CONNECTING
        self.task = asyncio.ensure_future(self._connect(replica))

    async def _connect(self, replica: Replica) -> None:
        proxy = self.client.proxy
        try:
            conn = await replica.connect(proxy.now(), proxy.connect_timeout_s)
        except CONNECT_ERRORS:
            replica.stats.error("connect_failed")
            self.pool.release(replica, failed=True)
            if self.state == CONNECTING:
                self._next_replica(replica)
            return
        if self.state != CONNECTING:  # the client left meanwhile: generate nothing for nobody
            replica.keep(conn, proxy.now())
            self.pool.release(replica)
            return
        self._send(conn)

    def _next_replica(self, refused: Replica) -> None:
        self.excluded |= {refused.index}
        if not self.pool.usable(self.excluded):
            self.answer(502, error_body(f"no replica of {self.pool.alias!r} accepted a connection", "api_error",
                                         "replica_unreachable"))
        else:
            self.state = CHOOSING
            self.begin()

    # -- the request, once

    def _send(self, conn: Upstream) -> None:
        self.state, self.conn = SENT, conn
        conn.exchange = self
        head = self.head
        request = CRLF.join([head.start[0] + b" " + self.path + b" HTTP/1.1", self.replica.host_line,
                             *http1.forward_lines(head)]) + END
        if self.client.write_paused:
            conn.transport.pause_reading()
        if self.body is not None:
            conn.transport.write(request + self.body)
            return
        conn.transport.write(request)
        self.request_body = Chunks() if head.length == CHUNKED else Counted(head.length)
        self.client.stream_to(self)

    def client_data(self, data: bytes) -> None:
        """More of a request body that is relayed as it arrives."""
        relay = self.request_body
        if relay is None:  # the replica answered before the body's end: the rest is dropped
            return
        try:
            pieces, rest = relay.feed(data)
        except BadMessage as err:
            self._bad_body(str(err))
            return
        if pieces and not self.conn.closed:
            self.replica.progress = self.client.proxy.now()  # the upload is progress too
            self.conn.transport.write(b"".join(pieces))
        if rest is not None:
            self.request_body = None
            self.client.unread(rest)

    # -- the response, as it arrives

    def upstream_data(self, data: bytes) -> None:
        self.replica.progress = self.client.proxy.now()
        if self.status:
            self._body(data)
            return
        buf = self.leftover + data if self.leftover else data
        while True:
            end = buf.find(END)
            if end < 0 or end > READ_LIMIT:  # too large, wherever its end falls
                if len(buf) > READ_LIMIT:
                    self._failed("response head too large")
                    return
                self.leftover = buf
                return
            try:
                response = http1.parse_response(buf[:end + 4], self.head.start[0])
            except BadMessage as err:
                self._failed(str(err))
                return
            buf = buf[end + 4:]
            if response.length != NO_BODY or http1.status_of(response) >= 200:
                break  # not a 1xx interim response (the client did not ask for them: Expect was answered here)
        self.leftover = b""
        self._relay_head(response, buf)

    def _relay_head(self, response: Head, rest: bytes) -> None:
        self.status, self.upstream_close = http1.status_of(response), response.close
        dechunk = response.length == CHUNKED and self.head.start[2] == b"HTTP/1.0"
        self.to_close = self.head.close or response.length == UNTIL_CLOSE or dechunk
        drop = frozenset({b"transfer-encoding"}) if dechunk else frozenset()
        out = http1.forward_response_head(response, drop, self.to_close)
        length = response.length
        if length == NO_BODY or length == 0:
            self.client.transport.write(out)
            self.reusable = not rest
            self._complete()
            return
        self.framing = Chunks(dechunk) if length == CHUNKED else Counted(length) if length > 0 else None
        if length > 0 and len(rest) >= length:  # the whole body came with the head: one write
            self.client.transport.write(out + rest[:length])
            self.reusable = len(rest) == length
            self._complete()
            return
        self.client.transport.write(out)
        if rest:
            self._body(rest)

    def _body(self, data: bytes) -> None:
        if self.framing is None:  # until the replica closes
            self.client.transport.write(data)
            return
        try:
            pieces, rest = self.framing.feed(data)
        except BadMessage:
            self._abandon("response_broken")
            return
        if pieces:
            self.client.transport.write(b"".join(pieces) if len(pieces) > 1 else pieces[0])
        if rest is not None:
            self.reusable = not rest  # bytes past the response: the connection's framing is lost
            self._complete()

    def _complete(self) -> None:
        """The whole response was relayed: account, keep or close both connections."""
        replica, conn, now = self.replica, self.conn, self.client.proxy.now()
        replica.stats.respond(self.status, now - self.start)
        self.pool.stats.respond(self.status, now - self.start)
        self.state = DONE
        body_left = self.request_body is not None  # the replica answered before the body's end
        self.request_body = None
        if self.reusable and not body_left and not self.upstream_close:
            if self.client.write_paused:
                conn.transport.resume_reading()
            replica.keep(conn, now)
        else:
            conn.close()
        self.pool.release(replica, answered_5xx=self.status >= 500)
        self.client.finished(not (self.to_close or body_left))

    # -- failures

    def upstream_closed(self, exc: Exception | None) -> None:
        """The replica connection ended (or broke, `exc`) before the response was complete."""
        if self.state != SENT:
            return
        if not self.status:
            self._failed(type(exc).__name__ if exc else "connection closed")
        elif self.framing is None and exc is None:
            self.reusable = False
            self._complete()
        else:
            self._abandon("response_broken")

    def _failed(self, why: str) -> None:
        """No response (head) came: 502, and the request is not sent anywhere else."""
        replica = self.replica
        self.conn.close()
        replica.stats.error("no_response")
        replica.stats.respond(502, self.client.proxy.now() - self.start)
        self.pool.release(replica, failed=True)
        self.answer(502, error_body(
            f"replica {replica.target.name} of {self.pool.alias!r} failed after the request was sent "
            f"({why}); not resent", "api_error", "replica_failed"))

    def _abandon(self, why: str) -> None:
        """The exchange cannot finish: close the replica connection (a replica stops generating for a
        request whose connection closed) and the client's."""
        self.conn.close()
        self.replica.stats.error(why)
        self.pool.stats.error(why)
        self.state = DONE
        self.pool.release(self.replica)
        self.client.finished(False)

    def _bad_body(self, why: str) -> None:
        """The request body's framing broke: the replica connection closes (its request never
        ends), and the client is answered 400 unless the replica's response has begun."""
        if self.status:
            self._abandon("bad_request_body")
            return
        self.conn.close()
        self.replica.stats.error("bad_request_body")
        self.pool.stats.error("bad_request_body")
        self.pool.stats.respond(400, self.client.proxy.now() - self.start)
        self.state = DONE
        self.request_body = None
        self.pool.release(self.replica)
        self.client.exchange = self.client.streaming = None
        self.client.refuse(400, f"malformed chunked request body ({why})", "bad_request_body")

    def client_gave_up(self) -> None:
        """The request body stopped coming for the idle timeout."""
        if self.state == SENT:
            self._abandon("upload_timeout")

    def client_lost(self) -> None:
        """The client connection closed."""
        state, self.state = self.state, DONE
        if state == QUEUED:
            self.pool.cancel(self.waiter)
        if state in (QUEUED, CONNECTING):  # _connect gives the slot back
            self.pool.stats.error("client_gone")
        elif state == SENT:
            self.state = SENT
            self._abandon("client_gone")

    def answer(self, status: int, body: bytes, extra: tuple[bytes, ...] = ()) -> None:
        """A response of the gateway's own; the connection stays only if no request body is left unread."""
        keep = self.head.length == 0 and not self.head.close
        self.client.transport.write(http1.simple_response(status, body, extra, close=not keep))
        self.pool.stats.respond(status, self.client.proxy.now() - self.start)
        self.state = DONE
        self.client.finished(keep)
