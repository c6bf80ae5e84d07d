"""The supervisor's word on each replica, followed while the gateway serves.

`gateway-routes.json` (written atomically by the supervisor, the only writer):
{"schema": 1, "replicas": {"<deployment>/<replica>": {"state": "serving" | "lost" | "restarting",
                                                       "base_url": str, "readmit": int}}}
A replica `lost` or `restarting` is out of rotation; `serving` puts one back that was lost or
restarting (at `base_url`: a restart may move it to a new port), and one that the gateway ejected
once `readmit` has reached its ejections (the supervisor probed it and proved it ours). A replica
the file does not name keeps what it has; a file that is not valid changes nothing and is logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any, Optional

import attrs

from dd_slurm.gateway.pool import AliasPool, Replica

SCHEMA = 1
STATES = ("serving", "lost", "restarting")
POLL_S = 0.1  # one stat() a poll: a lost replica leaves rotation within this of the supervisor's word


@attrs.frozen
class Route:
    state: str
    base_url: str
    readmit: int


def parse(text: str, known: Iterable[str]) -> dict[str, Route]:
    """The routes by replica name; ValueError naming the first wrong field."""
    from dd_slurm.gateway.config_hooks import base_url

    data = json.loads(text)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("replicas"), dict):
        raise ValueError("not a routes document of schema 1")
    names, routes = set(known), {}
    for name, entry in data["replicas"].items():
        if name not in names:
            raise ValueError(f"replicas.{name[:64]}: not a replica of this gateway")
        if not isinstance(entry, dict) or set(entry) != {"state", "base_url", "readmit"}:
            raise ValueError(f"replicas.{name}: must have exactly state, base_url, readmit")
        if entry["state"] not in STATES:
            raise ValueError(f"replicas.{name}.state: must be one of {', '.join(STATES)}")
        if type(entry["readmit"]) is not int or entry["readmit"] < 0:
            raise ValueError(f"replicas.{name}.readmit: must be an integer >= 0")
        routes[name] = Route(entry["state"], base_url(entry["base_url"], str), entry["readmit"])
    return routes


def apply(pool: AliasPool, replica: Replica, route: Route) -> None:
    """Bring one replica's rotation in line with the supervisor's word."""
    if route.state != "serving":
        pool.take_out(replica, route.state)
    elif replica.out in ("lost", "restarting"):  # restarted (a stalled one stays out until the supervisor loses it)
        pool.put_back(replica, attrs.evolve(replica.target, base_url=route.base_url))
    elif replica.out == "ejected" and route.readmit >= replica.ejections:
        pool.put_back(replica)


class Follower:
    """Reads the routes file when it changes (by inode, size and mtime) and applies it."""

    def __init__(self, path: Optional[str], pools: Iterable[AliasPool], log: Callable[[str], None]) -> None:
        self.path, self.log = path, log
        self.replicas = {r.target.name: (pool, r) for pool in pools for r in pool.replicas}
        self.seen: Any = None

    def poll(self) -> None:
        if self.path is None:
            return
        try:
            stat = os.stat(self.path)
        except OSError:
            return
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key == self.seen:
            return
        self.seen = key
        try:
            with open(self.path, encoding="utf-8") as file:
                routes = parse(file.read(), self.replicas)
        except (OSError, ValueError) as err:
            self.log(f"error: routes: {self.path}: {err}; rotation unchanged")
            return
        for name, route in routes.items():
            pool, replica = self.replicas[name]
            apply(pool, replica, route)
