"""The proxy: `/<alias>/...` on a keep-alive client connection -> `/...` on a replica of the alias.

Headers and bodies pass through unchanged but for Host and connection-level headers; response
bodies are relayed as they arrive (chunked ones chunk by chunk), never buffered whole. A request is
sent to one replica only: a failed connect moves it to another replica, but once a byte of it was
written to a replica it is never written again (a later failure answers 502).
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Callable

from dd_slurm.gateway import http1
from dd_slurm.gateway.http1 import CHUNKED, CRLF, END, NO_BODY, UNTIL_CLOSE, BadMessage, Head
from dd_slurm.gateway.pool import AliasPool, Rejected, Replica, Upstream

PREREAD_MAX = 1 << 20  # request bodies up to this size are read before a replica is chosen
PIECE = 1 << 16
HIGH_WATER = 1 << 18
STATS_PATH = b"/_gateway/stats"  # aliases start with [A-Za-z0-9]: no clash
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
CONNECT_ERRORS = (OSError, asyncio.TimeoutError)
UPSTREAM_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, BadMessage, ValueError)


def error_body(message: str, kind: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()


class Proxy:
    def __init__(self, pools: dict[str, AliasPool], api_key: str | None, retry_after_s: int,
                 connect_timeout_s: float, now: Callable[[], float], stats: Callable[[], dict]) -> None:
        self.pools = {alias.encode(): pool for alias, pool in pools.items()}
        self.auth = b"Bearer " + api_key.encode() if api_key else None
        self.retry_after = b"retry-after: %d" % retry_after_s
        self.connect_timeout_s, self.now, self.stats = connect_timeout_s, now, stats
        self.hosts = {id(r): b"host: %s:%d" % (r.host.encode(), r.port) for p in pools.values() for r in p.replicas}

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection: requests in turn until either side closes."""
        try:
            while await self._one(reader, writer):
                pass
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            data = await reader.readuntil(END)
        except asyncio.IncompleteReadError:
            return False
        except asyncio.LimitOverrunError:
            writer.write(http1.simple_response(431, error_body("request head too large", "invalid_request_error",
                                                              "head_too_large"), close=True))
            return False
        start = self.now()
        try:
            head = http1.parse_request(data)
        except BadMessage as err:
            writer.write(http1.simple_response(err.status, error_body(str(err), "invalid_request_error", "bad_request"),
                                               close=True))
            return False
        if any(name == b"expect" for name, _ in head.headers) and head.length != 0:
            writer.write(CONTINUE)
        body = None
        if 0 <= head.length <= PREREAD_MAX:  # read now, so that a refusal can keep the connection
            body = await reader.readexactly(head.length)
            head = _read(head)
        target = head.start[1]
        alias = target[1:].split(b"/", 1)[0]
        pool = self.pools.get(alias) if target[:1] == b"/" else None
        if pool is None:
            return self._local(writer, head, target)
        pool.stats.requests += 1
        if self.auth is not None and not self._authorized(head):
            return self._refuse(writer, head, pool, start, 401, error_body(
                "missing or wrong API key (Authorization: Bearer ...)", "invalid_request_error", "invalid_api_key"))
        return await self._forward(reader, writer, head, body, pool, target[len(alias) + 1:] or b"/", start)

    def _authorized(self, head: Head) -> bool:
        if self.auth is None:
            return True  # no key configured (the caller checks this first)
        for name, line in head.headers:
            if name == b"authorization":
                return hmac.compare_digest(line.partition(b":")[2].strip(b" \t"), self.auth)
        return False

    def _local(self, writer: asyncio.StreamWriter, head: Head, target: bytes) -> bool:
        keep = head.length == 0 and not head.close
        if target == STATS_PATH and head.start[0] == b"GET":
            writer.write(http1.simple_response(200, json.dumps(self.stats()).encode(), close=not keep))
        else:
            known = ", ".join(sorted(a.decode() for a in self.pools))
            writer.write(http1.simple_response(404, error_body(
                f"no model alias in {target[:80].decode(errors='replace')!r}; paths are /ALIAS/v1/..., "
                f"aliases: {known}", "invalid_request_error", "model_not_found"), close=not keep))
        return keep

    def _refuse(self, writer: asyncio.StreamWriter, head: Head, pool: AliasPool, start: float, status: int,
                body: bytes, extra: tuple[bytes, ...] = ()) -> bool:
        """A response of the gateway's own; the connection stays only if no request body is left unread."""
        keep = head.length == 0 and not head.close
        writer.write(http1.simple_response(status, body, list(extra), close=not keep))
        pool.stats.respond(status, self.now() - start)
        return keep

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: Head,
                       body: bytes | None, pool: AliasPool, path: bytes, start: float) -> bool:
        """`body`: the request body when it was read already (None: relayed as it arrives)."""
        excluded: frozenset[int] = frozenset()
        while True:
            try:
                replica = await pool.acquire(excluded)
            except Rejected as rejected:
                return self._refuse(writer, head, pool, start, 429, error_body(
                    f"model alias {pool.alias!r} is at capacity ({rejected.code.replace('_', ' ')}); retry later",
                    "rate_limit_error", rejected.code), (self.retry_after,))
            try:
                conn = await replica.connect(self.now(), self.connect_timeout_s)
                break
            except CONNECT_ERRORS:
                replica.stats.error("connect_failed")
                pool.release(replica, failed=True)
                excluded |= {replica.index}
            if len(excluded) == len(pool.replicas):
                return self._refuse(writer, head, pool, start, 502, error_body(
                    f"no replica of {pool.alias!r} accepted a connection", "api_error", "replica_unreachable"))
        if reader.at_eof():  # the client left while it waited: generate nothing for nobody
            replica.keep(conn, self.now())
            pool.stats.error("client_gone")
            pool.release(replica)
            return False
        return await self._exchange(reader, writer, head, pool, replica, conn, path, body, start)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: Head,
                        pool: AliasPool, replica: Replica, conn: Upstream, path: bytes, body: bytes | None,
                        start: float) -> bool:
        """Send the request once, relay the response; False when the client connection must close."""
        request = CRLF.join([head.start[0] + b" " + path + b" HTTP/1.1", self.hosts[id(replica)],
                             *http1.forward_lines(head)]) + END
        try:
            conn.writer.write(request + body if body is not None else request)
            if body is None:
                await _relay_body(reader, conn.writer, head.length)
            response = await self._response_head(conn, replica, head.start[0])
        except ClientGone:
            return self._abandon(pool, replica, conn, "client_gone")
        except UPSTREAM_ERRORS as err:
            keep = body is not None and not head.close  # a streamed body may be left half read
            conn.writer.close()
            replica.stats.error("no_response")
            pool.release(replica, failed=True)
            for counters in (pool.stats, replica.stats):
                counters.respond(502, self.now() - start)
            writer.write(http1.simple_response(502, error_body(
                f"replica {replica.target.name} of {pool.alias!r} failed after the request was sent "
                f"({type(err).__name__}); not resent", "api_error", "replica_failed"), close=not keep))
            return keep
        status = http1.status_of(response)
        try:
            reusable, client_keep = await self._relay_response(conn, replica, writer, head, response)
        except ClientGone:
            return self._abandon(pool, replica, conn, "client_gone")
        except UPSTREAM_ERRORS:
            return self._abandon(pool, replica, conn, "response_broken")
        elapsed = self.now() - start
        replica.stats.respond(status, elapsed)
        pool.stats.respond(status, elapsed)
        if reusable:
            replica.keep(conn, self.now())
        else:
            conn.writer.close()
        pool.release(replica)
        return client_keep and not writer.is_closing()

    def _abandon(self, pool: AliasPool, replica: Replica, conn: Upstream, why: str) -> bool:
        """The exchange cannot finish: close the replica connection (a replica stops generating for a
        request whose connection closed) and the client's."""
        conn.writer.close()
        replica.stats.error(why)
        pool.stats.error(why)
        pool.release(replica)
        return False

    async def _response_head(self, conn: Upstream, replica: Replica, method: bytes) -> Head:
        while True:
            data = await conn.reader.readuntil(END)
            replica.progress = self.now()
            response = http1.parse_response(data, method)
            if response.length != NO_BODY or http1.status_of(response) >= 200:
                return response
            # 1xx interim responses: the client did not ask for them (Expect was answered here)

    async def _relay_response(self, conn: Upstream, replica: Replica, writer: asyncio.StreamWriter,
                              request: Head, response: Head) -> tuple[bool, bool]:
        """Relay the response; whether the upstream and the client connection can be kept."""
        dechunk = response.length == CHUNKED and request.start[2] == b"HTTP/1.0"
        to_close = request.close or response.length == UNTIL_CLOSE or dechunk
        drop = frozenset({b"transfer-encoding"}) if dechunk else frozenset()
        lines = [b"HTTP/1.1 " + response.start[1] + b" " + response.start[2], *http1.forward_lines(response, drop)]
        if to_close:
            lines.append(b"connection: close")
        out = CRLF.join(lines) + END
        length = response.length
        if length == NO_BODY or length == 0:
            writer.write(out)
        elif 0 < length <= PIECE:
            data = await conn.reader.readexactly(length)
            replica.progress = self.now()
            writer.write(out + data)
        else:
            writer.write(out)
            if length == CHUNKED:
                await self._relay_chunks(conn.reader, replica, writer, dechunk)
            else:
                await self._relay_bytes(conn.reader, replica, writer, length)
        await _pace(writer)
        return not response.close, not to_close

    async def _relay_chunks(self, reader: asyncio.StreamReader, replica: Replica, writer: asyncio.StreamWriter,
                            dechunk: bool) -> None:
        while True:
            line = await reader.readuntil(CRLF)
            size = http1.chunk_size(line)
            if size == 0:
                while True:  # trailer fields, then the empty line
                    item = await reader.readuntil(CRLF)
                    line += item
                    if item == CRLF:
                        break
                replica.progress = self.now()
                if not dechunk:
                    writer.write(line)
                return
            data = await reader.readexactly(size + 2)
            replica.progress = self.now()
            if data[-2:] != CRLF:
                raise BadMessage(502, "chunk not followed by CRLF")
            writer.write(data[:-2] if dechunk else line + data)
            await _pace(writer)

    async def _relay_bytes(self, reader: asyncio.StreamReader, replica: Replica, writer: asyncio.StreamWriter,
                           length: int) -> None:
        """`length` bytes, or (UNTIL_CLOSE) everything until the replica closes."""
        remaining = length if length >= 0 else None
        while remaining is None or remaining > 0:
            data = await reader.read(PIECE if remaining is None else min(remaining, PIECE))
            if not data:
                if remaining is None:
                    return
                raise asyncio.IncompleteReadError(b"", remaining)
            replica.progress = self.now()
            writer.write(data)
            if remaining is not None:
                remaining -= len(data)
            await _pace(writer)


class ClientGone(Exception):
    """The client closed its connection or sent a broken body."""


async def _pace(writer: asyncio.StreamWriter) -> None:
    """Stop relaying when the client is gone; wait when it reads slower than the replica writes."""
    if writer.is_closing():
        raise ClientGone()
    if writer.transport.get_write_buffer_size() > HIGH_WATER:
        try:
            await writer.drain()
        except OSError as err:
            raise ClientGone() from err


def _read(head: Head) -> Head:
    """The head as if its body had been consumed (it was pre-read)."""
    return Head(head.start, head.headers, 0, head.close)


async def _client_read(coro):
    try:
        return await coro
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, BadMessage) as err:
        raise ClientGone() from err


async def _relay_body(reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, length: int) -> None:
    """A request body too large to pre-read, or chunked, relayed to the replica as it arrives."""
    if length == CHUNKED:
        while True:
            line = await _client_read(reader.readuntil(CRLF))
            try:
                size = http1.chunk_size(line)
            except BadMessage as err:
                raise ClientGone() from err
            upstream.write(line)
            if size == 0:
                while line != CRLF:
                    line = await _client_read(reader.readuntil(CRLF))
                    upstream.write(line)
                return
            upstream.write(await _client_read(reader.readexactly(size + 2)))
            await upstream.drain()
    remaining = length
    while remaining:
        data = await _client_read(reader.read(min(remaining, PIECE)))
        if not data:
            raise ClientGone()
        upstream.write(data)
        remaining -= len(data)
        await upstream.drain()
