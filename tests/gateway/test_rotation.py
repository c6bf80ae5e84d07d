"""Which replicas are in rotation (no sockets): ejection after consecutive failures, never the last
one, readmission, and the supervisor's routes file (lost, restarting, serving again)."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.clock import FakeClock
from dd_slurm.gateway.config import ReplicaTarget
from dd_slurm.gateway.pool import AliasPool
from dd_slurm.gateway.routes import Follower, parse

pytestmark = pytest.mark.timeout(60)


def pool(count: int = 3, eject_after: int = 3) -> tuple[AliasPool, list[str]]:
    changes: list[str] = []
    targets = [ReplicaTarget("d", i, f"http://127.0.0.1:{9000 + i}", 4) for i in range(count)]
    made = AliasPool("m", targets, 8, 5.0, FakeClock().monotonic, eject_after,
                     lambda: changes.append(",".join(r.out or "-" for r in made.replicas)))
    return made, changes


def fail(p: AliasPool, index: int, times: int, **how: bool) -> None:
    for _ in range(times):
        replica = p.replicas[index]
        replica.inflight += 1
        p.release(replica, **how)


@pytest.mark.parametrize("how", [{"failed": True}, {"answered_5xx": True}])
def test_consecutive_failures_eject_a_replica_and_a_success_resets_the_count(how) -> None:
    """eject_after - 1 failures, a success, eject_after - 1 again: still in rotation; one more
    (connect failures and 5xx answers alike) ejects it, counted, and no request goes to it."""
    p, changes = pool()
    fail(p, 1, 2, **how)
    fail(p, 1, 1)
    fail(p, 1, 2, **how)
    before = p.replicas[1].out
    fail(p, 1, 1, **how)
    chosen = {p.take().index for _ in range(6)}
    assert ("", "ejected", 1, ["-,ejected,-"], {0, 2}) == (before, p.replicas[1].out, p.replicas[1].ejections,
                                                           changes, chosen)


def test_the_last_replica_in_rotation_is_never_ejected() -> None:
    """With two replicas, failures eject the first; the second's failures leave it serving: its
    alias would otherwise have nowhere to go."""
    p, _ = pool(count=2)
    fail(p, 0, 3, failed=True)
    fail(p, 1, 10, failed=True)
    assert ["ejected", ""] == [r.out for r in p.replicas]


def test_a_request_refused_by_every_replica_in_rotation_has_nowhere_left() -> None:
    """`usable` counts only replicas in rotation outside the refused ones."""
    p, _ = pool()
    p.take_out(p.replicas[2], "lost")
    assert (True, False) == (p.usable(frozenset({0})), p.usable(frozenset({0, 1})))


def test_put_back_hands_the_queue_head_to_the_returning_replica() -> None:
    """Every replica out but one, which is full: a waiter queues; readmitting another hands it the
    slot at once."""
    async def scenario() -> tuple:
        p, _ = pool(count=2)
        p.replicas[0].target = ReplicaTarget("d", 0, "http://127.0.0.1:9000", 1)
        p.caps = [1, 1]
        p.take_out(p.replicas[1], "ejected")
        held = await p.acquire()
        waiter = asyncio.ensure_future(p.acquire())
        await asyncio.sleep(0)
        p.put_back(p.replicas[1])
        got = await waiter
        return held.index, got.index

    assert (0, 1) == asyncio.run(scenario())


def routes_file(tmp_path, replicas: dict) -> str:
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"schema": 1, "replicas": replicas}))
    return str(path)


def entry(state: str, port: int = 9001, readmit: int = 0) -> dict:
    return {"state": state, "base_url": f"http://127.0.0.1:{port}/v1", "readmit": readmit}


def test_the_routes_file_takes_out_readmits_and_moves_replicas(tmp_path) -> None:
    """lost takes a replica out; serving at a new port puts it back aimed there (a restart); an
    ejected replica comes back only once `readmit` reaches its ejections."""
    p, _ = pool()
    path = routes_file(tmp_path, {"d/1": entry("lost")})
    follower = Follower(path, [p], print)
    follower.poll()
    lost = p.replicas[1].out
    routes_file(tmp_path, {"d/1": entry("serving", port=9101)})
    follower.seen = None
    follower.poll()
    moved = (p.replicas[1].out, p.replicas[1].port)
    fail(p, 2, 3, failed=True)
    routes_file(tmp_path, {"d/2": entry("serving", 9002, readmit=0)})
    follower.seen = None
    follower.poll()
    still = p.replicas[2].out
    routes_file(tmp_path, {"d/2": entry("serving", 9002, readmit=1)})
    follower.seen = None
    follower.poll()
    assert ("lost", ("", 9101), "ejected", "") == (lost, moved, still, p.replicas[2].out)


@pytest.mark.parametrize(("replicas", "expected"), [
    ({"d/9": entry("lost")}, "replicas.d/9: not a replica of this gateway"),
    ({"d/0": {"state": "lost"}}, "replicas.d/0: must have exactly state, base_url, readmit"),
    ({"d/0": entry("gone")}, "replicas.d/0.state: must be one of serving, lost, restarting"),
    ({"d/0": {**entry("lost"), "readmit": -1}}, "replicas.d/0.readmit: must be an integer >= 0"),
    ({"d/0": {**entry("lost"), "base_url": "ftp://x:1"}}, "must be http://HOST:PORT or http://HOST:PORT/v1"),
])
def test_a_bad_routes_file_changes_nothing_and_says_why(tmp_path, replicas, expected) -> None:
    """A routes file that is not valid is logged with the field, and no replica moves."""
    p, _ = pool()
    logged: list[str] = []
    Follower(routes_file(tmp_path, replicas), [p], logged.append).poll()
    assert (True, ["", "", ""]) == (expected in logged[0], [r.out for r in p.replicas])


@given(st.text(max_size=200))
def test_parse_never_raises_anything_but_value_error(text) -> None:
    """Any text: routes or ValueError (JSONDecodeError is one), never another exception."""
    try:
        parse(text, ["d/0"])
    except ValueError:
        pass


def test_metrics_count_replicas_by_state_and_the_events() -> None:
    """After one ejection and one loss: `replicas` by state and `replica_events_total` say so."""
    from dd_slurm.gateway.metrics import exposition

    p, _ = pool()
    fail(p, 0, 3, failed=True)
    p.take_out(p.replicas[1], "lost")
    text = exposition([p]).decode()
    wanted = ['dd_slurm_gateway_replicas{alias="m",state="serving"} 1',
              'dd_slurm_gateway_replicas{alias="m",state="ejected"} 1',
              'dd_slurm_gateway_replicas{alias="m",state="lost"} 1',
              'dd_slurm_gateway_replica_events_total{alias="m",event="ejected"} 1',
              'dd_slurm_gateway_replica_events_total{alias="m",event="lost"} 1',
              'dd_slurm_gateway_replica_events_total{alias="m",event="restarted"} 0']
    assert wanted == [line for line in wanted if line in text.splitlines()]
