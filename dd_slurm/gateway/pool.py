"""Backpressure and upstream connections: per-replica in-flight caps, the bounded per-alias FIFO
queue with its wait timeout, each replica's pool of idle keep-alive connections, and which
replicas are in rotation: one is taken out when the supervisor says it is lost or restarting, when
it stalled (an expendable one), or when `eject_after` consecutive connect failures or 5xx answers
eject it (never the last replica in rotation); an ejected one comes back when the supervisor
readmits it."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from dd_slurm.gateway.config import ReplicaTarget
from dd_slurm.gateway.router import pick
from dd_slurm.gateway.stats import Counters

DOWN_COOLDOWN_S = 1.0  # a replica that refused a connection is skipped this long, unless all are
IDLE_MAX_S = 2.0  # idle upstream connections older than this are dropped (uvicorn closes at 5 s)
READ_LIMIT = 1 << 16
OUT_REASONS = ("ejected", "stalled", "lost", "restarting")  # why a replica is out of rotation
EVENTS = ("ejected", "stalled", "lost", "restarted")


class Reading(asyncio.BufferedProtocol):
    """Reads into one buffer shared by every connection (asyncio fills it and reports how much in
    one go, so it is never shared at once), then hands `data_received` a copy of what came.
    A plain Protocol would have the event loop allocate 256 KiB per read: mmap, mremap and munmap,
    three system calls per read."""

    __slots__ = ()
    BUFFER = bytearray(READ_LIMIT)
    VIEW = memoryview(BUFFER)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.VIEW

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self.VIEW[:nbytes]))

    def data_received(self, data: bytes) -> None:
        raise NotImplementedError


class Rejected(Exception):
    """No replica slot: `code` is queue_full or queue_timeout."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Upstream(Reading):
    """One connection to a replica. While it serves a request, what the replica sends goes to that
    request's `exchange`; while idle in the pool, anything the replica sends (its close included)
    makes it unusable."""

    __slots__ = ("closed", "exchange", "idle_since", "sock", "transport")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.transport: Any = None
        self.exchange: Any = None
        self.idle_since = 0.0
        self.closed = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.exchange is not None:
            self.exchange.upstream_data(data)
        else:  # bytes nobody asked for: the connection's framing is lost
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.upstream_closed(exc)

    def pause_writing(self) -> None:  # a request body streams faster than the replica reads it
        if self.exchange is not None:
            self.exchange.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.client.transport.resume_reading()

    def close(self) -> None:
        self.exchange = None
        self.closed = True
        self.transport.close()

    def reusable(self, now: float) -> bool:
        """Idle, recent, and still open as far as the kernel knows: the replica's close (or stray
        bytes) may be waiting in the socket before the event loop has seen it, so peek."""
        if self.closed or self.transport.is_closing() or now - self.idle_since > IDLE_MAX_S:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True  # nothing to read: open and quiet
        except OSError:
            return False
        return False  # end of stream, or stray bytes


async def open_upstream(host: str, port: int) -> Upstream:
    """A new connection to host:port (every address it resolves to, in turn); OSError when none."""
    loop = asyncio.get_running_loop()
    error: OSError = OSError(f"{host}: no address")
    for family, kind, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
            _, conn = await loop.create_connection(functools.partial(Upstream, sock), sock=sock)
            return conn
        except OSError as err:
            sock.close()
            error = err
        except BaseException:
            sock.close()
            raise
    raise error


class Replica:
    """A replica as the gateway tracks it: load, health, progress and idle connections."""

    __slots__ = ("base", "down_until", "ejections", "exposes", "failures", "host", "host_line", "idle", "index",
                 "inflight", "out", "out_since", "port", "progress", "raw", "server", "stats", "target")

    def __init__(self, target: ReplicaTarget, index: int) -> None:
        self.index = index
        self.aim(target)
        self.out = ""  # in rotation; else why not: lost, restarting, stalled, ejected
        self.out_since = 0.0
        self.failures = 0  # consecutive connect failures and 5xx answers
        self.ejections = 0
        self.server: dict | None = None  # its own /metrics' counts (replica_metrics), once read
        self.raw: dict = {}  # the counters as it last said them, and what earlier runs of it had counted
        self.base: dict = {}
        self.exposes = True  # False once its /metrics answered 404
        self.inflight = 0
        self.down_until = 0.0
        self.progress = 0.0  # last response byte, or when in-flight went from 0 to 1
        self.stats = Counters()
        self.idle: list[Upstream] = []

    def aim(self, target: ReplicaTarget) -> None:
        """Where its requests go (a replica restarted in place may listen on a new port)."""
        self.target = target
        self.host, self.port = target.host, target.port
        self.host_line = b"host: %s:%d" % (self.host.encode(), self.port)

    def note_server(self, counts: dict, now: float, wall: float) -> None:
        """Its /metrics' counts: a counter that went down is a new process (a restart), whose counts
        add to the earlier ones; generation tokens that grew with requests in flight are progress."""
        before = (self.server or {}).get("generation_tokens")
        for name in ("prompt_tokens", "generation_tokens"):
            value = counts.get(name, 0.0)
            if value < self.raw.get(name, 0.0):
                self.base[name] = self.base.get(name, 0.0) + self.raw[name]
            self.raw[name] = value
        self.server = {**counts, **{n: self.base.get(n, 0.0) + self.raw[n] for n in self.raw}, "at": wall}
        if before is not None and self.server["generation_tokens"] > before and self.inflight:
            self.progress = now

    def take_idle(self, now: float) -> Upstream | None:
        """The most recently used idle connection that is still good (the others are closed)."""
        while self.idle:
            conn = self.idle.pop()
            if conn.reusable(now):
                return conn
            conn.close()
        return None

    async def connect(self, now: float, timeout: float) -> Upstream:
        """A live idle connection, else a new one (OSError / TimeoutError when it cannot connect)."""
        conn = self.take_idle(now)
        if conn is None:
            conn = await asyncio.wait_for(open_upstream(self.host, self.port), timeout)
        return conn

    def keep(self, conn: Upstream, now: float) -> None:
        conn.exchange = None
        conn.idle_since = now
        self.idle.append(conn)

    def close_idle(self) -> None:
        while self.idle:
            self.idle.pop().close()


class Waiter:
    __slots__ = ("excluded", "future", "timer")

    def __init__(self, future: asyncio.Future, excluded: frozenset[int]) -> None:
        self.future, self.excluded = future, excluded
        self.timer: asyncio.TimerHandle | None = None


class AliasPool:
    """The replicas of one alias and the queue in front of them."""

    def __init__(self, alias: str, targets: Sequence[ReplicaTarget], queue_limit: int, queue_timeout_s: float,
                 now: Callable[[], float], eject_after: int = 0,
                 changed: Callable[[], None] = lambda: None) -> None:
        self.alias = alias
        self.eject_after, self.changed = eject_after, changed  # 0: never eject; `changed`: rotation changed
        self.replicas = [Replica(t, i) for i, t in enumerate(targets)]
        self.caps = [t.max_inflight for t in targets]
        self.queue_limit, self.queue_timeout_s, self.now = queue_limit, queue_timeout_s, now
        self.waiters: deque[Waiter] = deque()
        self.cursor = 0
        self.stats = Counters()
        self.events = dict.fromkeys(EVENTS, 0)  # replicas taken out (by why) and put back after a restart

    def _choose(self, excluded: frozenset[int]) -> Replica | None:
        now = self.now()
        loads = [r.inflight for r in self.replicas]
        allowed = [r.index not in excluded and not r.out for r in self.replicas]
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

    def take(self, excluded: frozenset[int] = frozenset()) -> Replica | None:
        """A replica slot now, or None: the caller must queue (nobody overtakes a waiter)."""
        return self._choose(excluded) if not self.waiters else None

    def enqueue(self, excluded: frozenset[int] = frozenset()) -> Waiter:
        """A place in the FIFO queue, whose future gets a replica slot or Rejected("queue_timeout");
        Rejected("queue_full") at once when the queue is full."""
        if len(self.waiters) >= self.queue_limit:
            self.stats.error("queue_full")
            raise Rejected("queue_full")
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop.create_future(), excluded)
        waiter.timer = loop.call_later(self.queue_timeout_s, self._expire, waiter)
        self.waiters.append(waiter)
        self.stats.peak = max(self.stats.peak, len(self.waiters))
        return waiter

    async def acquire(self, excluded: frozenset[int] = frozenset()) -> Replica:
        """A replica slot, now or after a FIFO wait; Rejected when the queue is full or the wait too long."""
        replica = self.take(excluded)
        if replica is not None:
            return replica
        waiter = self.enqueue(excluded)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            self.cancel(waiter)
            raise

    def _expire(self, waiter: Waiter) -> None:
        if not waiter.future.done():
            self.cancel(waiter)
            self.stats.error("queue_timeout")
            waiter.future.set_exception(Rejected("queue_timeout"))

    def cancel(self, waiter: Waiter) -> None:
        """The waiter gives up its place, or the slot it was handed already."""
        if waiter.timer is not None:
            waiter.timer.cancel()
        try:
            self.waiters.remove(waiter)
        except ValueError:  # already handed a slot: give it back
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.release(waiter.future.result())

    def usable(self, excluded: frozenset[int]) -> bool:
        """Whether a replica in rotation is left outside `excluded` (a request refused by the others)."""
        return any(not r.out and r.index not in excluded for r in self.replicas)

    def release(self, replica: Replica, failed: bool = False, answered_5xx: bool = False) -> None:
        """The request on `replica` is over; `failed`: the replica could not be reached or sent no
        response (skipped for a moment); `eject_after` of these or of 5xx answers in a row take it
        out of rotation."""
        replica.inflight -= 1
        if failed:
            replica.down_until = self.now() + DOWN_COOLDOWN_S
        if failed or answered_5xx:
            replica.failures += 1
            if self.eject_after and replica.failures >= self.eject_after and not replica.out:
                self._eject(replica)
        else:
            replica.failures = 0
        self.hand_out()

    def _eject(self, replica: Replica) -> None:
        if not any(r.out == "" and r is not replica for r in self.replicas):
            return  # the last one in rotation stays: its alias would have nowhere to go
        replica.ejections += 1
        self.take_out(replica, "ejected")

    def take_out(self, replica: Replica, why: str) -> None:
        """Out of rotation (`why`): no new request goes to it; what it serves now finishes or fails."""
        if replica.out == why:
            return
        replica.out, replica.out_since = why, self.now()
        self.events[why] = self.events.get(why, 0) + 1
        replica.close_idle()
        self.changed()

    def put_back(self, replica: Replica, target: ReplicaTarget | None = None) -> None:
        """In rotation again (readmitted, or restarted at `target`); the queue's head may go to it."""
        if replica.out in ("lost", "restarting"):
            self.events["restarted"] += 1
        if target is not None and target != replica.target:
            replica.close_idle()
            replica.aim(target)
        replica.out, replica.failures, replica.down_until = "", 0, 0.0
        self.changed()
        self.hand_out()

    def hand_out(self) -> None:
        """Free slots to the waiters in FIFO order, while there are both."""
        while self.waiters:
            head = self.waiters[0]
            if head.future.done():
                self.waiters.popleft()
                continue
            chosen = self._choose(head.excluded)
            if chosen is None:
                return
            self.waiters.popleft()
            if head.timer is not None:
                head.timer.cancel()
            head.future.set_result(chosen)

    def stalled(self, now: float, timeout_s: float) -> list[Replica]:
        return [r for r in self.replicas if r.inflight and now - r.progress >= timeout_s and r.out != "stalled"]
