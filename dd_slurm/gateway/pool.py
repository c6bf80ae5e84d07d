"""Backpressure and upstream connections: per-replica in-flight caps, the bounded per-alias FIFO
queue with its wait timeout, and each replica's pool of idle keep-alive connections."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

from dd_slurm.gateway.config import ReplicaTarget
from dd_slurm.gateway.router import pick
from dd_slurm.gateway.stats import Counters

DOWN_COOLDOWN_S = 1.0  # a replica that refused a connection is skipped this long, unless all are
IDLE_MAX_S = 2.0  # idle upstream connections older than this are dropped (uvicorn closes at 5 s)
READ_LIMIT = 1 << 16


class Rejected(Exception):
    """No replica slot: `code` is queue_full or queue_timeout."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Upstream:
    """One connection to a replica."""

    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.idle_since = reader, writer, 0.0


class Replica:
    """A replica as the gateway tracks it: load, health, progress and idle connections."""

    __slots__ = ("down_until", "host", "idle", "index", "inflight", "port", "progress", "stats", "target")

    def __init__(self, target: ReplicaTarget, index: int) -> None:
        self.target, self.index = target, index
        self.host, self.port = target.host, target.port
        self.inflight = 0
        self.down_until = 0.0
        self.progress = 0.0  # last response byte, or when in-flight went from 0 to 1
        self.stats = Counters()
        self.idle: list[Upstream] = []

    async def connect(self, now: float, timeout: float) -> Upstream:
        """A live idle connection, else a new one (OSError / TimeoutError when it cannot connect)."""
        while self.idle:
            conn = self.idle.pop()
            if not (conn.reader.at_eof() or conn.writer.is_closing() or now - conn.idle_since > IDLE_MAX_S):
                return conn
            conn.writer.close()
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port, limit=READ_LIMIT),
                                                timeout)
        return Upstream(reader, writer)

    def keep(self, conn: Upstream, now: float) -> None:
        conn.idle_since = now
        self.idle.append(conn)

    def close_idle(self) -> None:
        while self.idle:
            self.idle.pop().writer.close()


class Waiter:
    __slots__ = ("excluded", "future")

    def __init__(self, future: asyncio.Future, excluded: frozenset[int]) -> None:
        self.future, self.excluded = future, excluded


class AliasPool:
    """The replicas of one alias and the queue in front of them."""

    def __init__(self, alias: str, targets: Sequence[ReplicaTarget], queue_limit: int, queue_timeout_s: float,
                 now: Callable[[], float]) -> None:
        self.alias = alias
        self.replicas = [Replica(t, i) for i, t in enumerate(targets)]
        self.caps = [t.max_inflight for t in targets]
        self.queue_limit, self.queue_timeout_s, self.now = queue_limit, queue_timeout_s, now
        self.waiters: deque[Waiter] = deque()
        self.cursor = 0
        self.stats = Counters()

    def _choose(self, excluded: frozenset[int]) -> Replica | None:
        now = self.now()
        loads = [r.inflight for r in self.replicas]
        allowed = [r.index not in excluded for r in self.replicas]
        up = [a and r.down_until <= now for a, r in zip(allowed, self.replicas)]
        index = pick(loads, self.caps, up, self.cursor)
        if index is None and up != allowed:  # every candidate is cooling down: try one anyway
            index = pick(loads, self.caps, allowed, self.cursor)
        if index is None:
            return None
        self.cursor = index + 1
        replica = self.replicas[index]
        replica.inflight += 1
        if replica.inflight == 1:
            replica.progress = now
        replica.stats.requests += 1
        replica.stats.peak = max(replica.stats.peak, replica.inflight)
        return replica

    async def acquire(self, excluded: frozenset[int] = frozenset()) -> Replica:
        """A replica slot, now or after a FIFO wait; Rejected when the queue is full or the wait too long."""
        replica = self._choose(excluded) if not self.waiters else None
        if replica is not None:
            return replica
        if len(self.waiters) >= self.queue_limit:
            self.stats.error("queue_full")
            raise Rejected("queue_full")
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop.create_future(), excluded)
        self.waiters.append(waiter)
        self.stats.peak = max(self.stats.peak, len(self.waiters))
        timer = loop.call_later(self.queue_timeout_s, self._expire, waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self._forget(waiter)
            raise
        finally:
            timer.cancel()

    def _expire(self, waiter: Waiter) -> None:
        if not waiter.future.done():
            self._forget(waiter)
            self.stats.error("queue_timeout")
            waiter.future.set_exception(Rejected("queue_timeout"))

    def _forget(self, waiter: Waiter) -> None:
        try:
            self.waiters.remove(waiter)
        except ValueError:  # already handed a slot: give it back
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.release(waiter.future.result())

    def release(self, replica: Replica, failed: bool = False) -> None:
        """The request on `replica` is over; `failed`: the replica could not be reached."""
        replica.inflight -= 1
        if failed:
            replica.down_until = self.now() + DOWN_COOLDOWN_S
        while self.waiters:
            head = self.waiters[0]
            if head.future.done():
                self.waiters.popleft()
                continue
            chosen = self._choose(head.excluded)
            if chosen is None:
                return
            self.waiters.popleft()
            head.future.set_result(chosen)

    def stalled(self, now: float, timeout_s: float) -> list[Replica]:
        return [r for r in self.replicas if r.inflight and now - r.progress >= timeout_s]
