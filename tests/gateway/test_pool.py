"""Backpressure (no sockets): caps, FIFO hand-over, queue limit and timeout, cancelled waiters."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.gateway.config import ReplicaTarget
from dd_slurm.gateway.pool import AliasPool, Rejected, open_upstream

pytestmark = pytest.mark.timeout(60)


def pool(caps=(1, 1), queue_limit=4, timeout=5.0) -> AliasPool:
    targets = [ReplicaTarget("d", i, f"http://127.0.0.1:{9000 + i}", cap) for i, cap in enumerate(caps)]
    return AliasPool("m", targets, queue_limit, timeout, FakeClock().monotonic)


def test_waiters_are_served_first_in_first_out() -> None:
    """With every slot taken, waiters get released slots in arrival order."""
    async def scenario() -> list[int]:
        p = pool(caps=(1,))
        held = await p.acquire()
        order: list[int] = []

        async def wait(n: int) -> None:
            replica = await p.acquire()
            order.append(n)
            p.release(replica)

        tasks = [asyncio.ensure_future(wait(n)) for n in range(3)]
        await asyncio.sleep(0)
        p.release(held)
        await asyncio.gather(*tasks)
        return order + [p.replicas[0].inflight, p.stats.peak]

    assert [0, 1, 2, 0, 3] == asyncio.run(scenario())


def test_full_queue_and_timeout_are_rejected_and_counted() -> None:
    """queue_limit waiters at most (the next is rejected queue_full); a wait past the timeout is
    rejected queue_timeout and leaves the queue."""
    async def scenario() -> tuple:
        p = pool(caps=(1,), queue_limit=1, timeout=0.05)
        await p.acquire()
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        with pytest.raises(Rejected) as full:
            await p.acquire()
        with pytest.raises(Rejected) as late:
            await waiting
        return full.value.code, late.value.code, len(p.waiters), p.stats.errors

    assert ("queue_full", "queue_timeout", 0, {"queue_full": 1, "queue_timeout": 1}) == asyncio.run(scenario())


def test_a_cancelled_waiter_gives_back_a_slot_it_was_handed() -> None:
    """A waiter cancelled after a slot was handed to it releases the slot (no leaked in-flight)."""
    async def scenario() -> int:
        p = pool(caps=(1,))
        held = await p.acquire()
        waiting = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        p.release(held)  # hands the slot to the waiter, whose task has not run yet
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return p.replicas[0].inflight

    assert 0 == asyncio.run(scenario())


def test_a_replica_that_refused_is_skipped_while_cooling_down() -> None:
    """After a failed connect the replica is avoided while others have room, used when none has."""
    async def scenario() -> list[int]:
        p = pool(caps=(2, 1))
        first = await p.acquire()
        p.release(first, failed=True)
        chosen = [(await p.acquire()).index, (await p.acquire()).index]
        return chosen

    assert [1, 0] == asyncio.run(scenario())


def test_a_pooled_connection_the_replica_closed_is_never_reused() -> None:
    """An idle connection whose replica closed it is not handed out again, even when the event
    loop has not yet seen the close (the socket is peeked); a quiet open one is."""
    async def scenario() -> tuple[bool, bool]:
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        replica = pool(caps=(2,)).replicas[0]
        replica.port = port
        first, second = await open_upstream("127.0.0.1", port), await open_upstream("127.0.0.1", port)
        accepted = [listener.accept()[0], listener.accept()[0]]
        replica.keep(first, 1000.0)
        replica.keep(second, 1000.0)
        accepted[1].close()  # `second` is the most recent: offered first, but closed by now
        time.sleep(0.05)  # the FIN reaches the kernel; the loop does not run meanwhile
        reused = replica.take_idle(1000.5)
        got = (reused is first, replica.take_idle(1000.5) is None)
        first.close()
        accepted[0].close()
        listener.close()
        return got

    assert (True, True) == asyncio.run(scenario())
