"""The gateway process: listen, publish where, watch for stalls, account, stop on SIGTERM.

What the supervisor watches:
- `state_path` (JSON, atomic): written once listening, with the bound port and one URL per alias
  (`state: "serving"`); rewritten on exit with `state: "stopped"` or `"stalled"` (then `stalled`
  names the replicas that had requests in flight and sent no byte for stall_timeout_s).
- `stats_path` (JSON, atomic): the accounting, written every STATS_EVERY_S while serving (with
  `window`: the last minute's requests and 2xx), on SIGTERM/SIGINT, on SIGUSR1, on a stall;
  `GET /_gateway/stats` answers the same document live.
- SIGUSR2: drain (new requests 503, in-flight ones finish; state `draining`, then `drained`).
- rotation (routes.py): the state file's `out` names every replica out of rotation, why (lost,
  restarting, stalled, ejected), since when and how often it was ejected; rewritten when it changes.
  A stall of an `expendable` replica takes it out (`stalled`) and the gateway serves on.
- exit code: 0 after SIGTERM/SIGINT; EXIT_STALLED after a stall; EXIT_CONFIG for a bad config or
  a missing API key variable; EXIT_LISTEN when the address cannot be bound.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

from dd_slurm.clock import Clock
from dd_slurm.gateway.config import GatewayConfig
from dd_slurm.gateway.pool import AliasPool
from dd_slurm.gateway.proxy import Limits, Proxy
from dd_slurm.gateway.stats import report
from dd_slurm.gateway.stops import STOP_SIGNALS, stop_requested
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.gateway_stats import write_stats

EXIT_CONFIG = 2
EXIT_LISTEN = 3
EXIT_STALLED = 75
STATE_SCHEMA = 1
STATS_EVERY_S = 5.0
WINDOW_S = 60.0
SCRAPE_EVERY_S = 5.0  # the replicas' /metrics; at most a quarter of stall_timeout_s
FINAL_SCRAPE_S = 1.0  # at the stop, of the time before the servers are stopped


def log(message: str) -> None:
    print(f"dd-slurm gateway[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


class Service:
    def __init__(self, config: GatewayConfig, clock: Clock, environ: Mapping[str, str],
                 received: Sequence[int] = ()) -> None:
        self.config, self.clock = config, clock
        self.received = received  # stop signals recorded before the loop's own handlers were in place
        self.api_key = environ.get(config.api_key_var) if config.api_key_var else None
        self.pools = {alias: AliasPool(alias, targets, config.queue_limit, config.queue_timeout_s, clock.monotonic,
                                       config.eject_after, self.rotation_changed)
                      for alias, targets in config.aliases.items()}
        self.started_at = clock.wall()
        self.state: dict = {}
        self.stalled: list[dict] = []
        self.proxy: Proxy | None = None
        self.window: dict | None = None
        self.draining: asyncio.Future | None = None

    def stats(self, addresses: bool = True) -> dict:
        """The accounting; `addresses=False` for answers over the network (no replica's address)."""
        document = report(self.pools.values(), self.clock.wall(), self.started_at, addresses)
        if self.proxy is not None:
            document["connections"] = {"open": len(self.proxy.connections), **self.proxy.counts}
        if self.window is not None:
            document["window"] = self.window
        return document

    def totals(self) -> tuple[int, int, float]:
        """(requests, 2xx answers, generation tokens the replicas counted) over every alias, so far."""
        return (sum(p.stats.requests for p in self.pools.values()),
                sum(p.stats.responses.get("2xx", 0) for p in self.pools.values()),
                sum((r.server or {}).get("generation_tokens", 0.0) for p in self.pools.values() for r in p.replicas))

    async def stats_every(self, stop: asyncio.Event) -> None:
        """gateway-stats.json rewritten every STATS_EVERY_S while serving (fresh processes on the
        login node read it), with the counts of the last minute (`window`)."""
        samples: deque[tuple[float, int, int, float]] = deque([(self.clock.monotonic(), *self.totals())])
        while not stop.is_set():
            await asyncio.sleep(STATS_EVERY_S)
            now, (requests, ok, tokens) = self.clock.monotonic(), self.totals()
            samples.append((now, requests, ok, tokens))
            while len(samples) > 2 and now - samples[1][0] >= WINDOW_S:
                samples.popleft()
            then, requests_then, ok_then, tokens_then = samples[0]
            self.window = {"seconds": round(now - then, 3), "requests": requests - requests_then, "ok": ok - ok_then,
                           "generation_tokens": max(0.0, tokens - tokens_then)}
            self.write_stats()

    async def scrape_every(self, stop: asyncio.Event) -> None:
        """The replicas' own counters every SCRAPE_EVERY_S (at most a quarter of stall_timeout_s)."""
        stall = self.config.stall_timeout_s
        interval = min(SCRAPE_EVERY_S, stall / 4) if stall else SCRAPE_EVERY_S
        while not stop.is_set():
            await self.scrape()
            await asyncio.sleep(interval)

    async def scrape(self, timeout: float = 2.0) -> None:
        """Every replica's own /metrics, side by side (replica_metrics): its token and request
        counts for the stats and /metrics, and its progress for the stall watch."""
        from dd_slurm.gateway.replica_metrics import NotExposed, read_metrics

        replicas = [r for pool in self.pools.values() for r in pool.replicas
                    if r.exposes and r.out not in ("lost", "restarting")]
        found = await asyncio.gather(*(read_metrics(r.host, r.port, timeout) for r in replicas),
                                     return_exceptions=True)
        now, wall = self.clock.monotonic(), self.clock.wall()
        for replica, counts in zip(replicas, found):
            if isinstance(counts, NotExposed):
                replica.exposes = False
            elif isinstance(counts, dict):
                replica.note_server(counts, now, wall)

    def write_stats(self) -> None:
        try:
            write_stats(Path(self.config.stats_path), self.stats())
        except OSError as err:
            log(f"error: stats_path: cannot write {self.config.stats_path} ({err.strerror})")

    def publish(self, state: str) -> None:
        self.state.update(state=state, updated_at=self.clock.wall(), stalled=self.stalled, out=self.out())
        write_json_atomic(Path(self.config.state_path), self.state, mode=0o644)

    def out(self) -> dict[str, dict]:
        """The replicas out of rotation: why, since when (wall seconds), how often ejected."""
        since = self.clock.wall() - self.clock.monotonic()
        return {r.target.name: {"why": r.out, "since": round(since + r.out_since, 3), "ejections": r.ejections}
                for pool in self.pools.values() for r in pool.replicas if r.out}

    def rotation_changed(self) -> None:
        if not self.state:
            return  # not serving yet: the first publish carries it
        try:
            self.publish(self.state["state"])
        except OSError as err:
            log(f"error: state_path: cannot write ({err.strerror})")
        log("out of rotation: " + (", ".join(f"{n} ({o['why']})" for n, o in self.out().items()) or "none"))

    async def run(self) -> int:
        if self.config.api_key_var and not self.api_key:
            log(f"error: api_key_var: the environment variable {self.config.api_key_var} is not set")
            return EXIT_CONFIG
        if stop_requested(self.received):
            log("stopped before serving")
            return 0
        config = self.config
        limits = Limits(config.header_timeout_s, config.idle_timeout_s, config.max_connections)
        raise_open_files_limit(limits.max_connections * 2 + 256)
        proxy = self.proxy = Proxy(self.pools, self.api_key, config.retry_after_s, config.connect_timeout_s,
                                   self.clock.monotonic, lambda: self.stats(addresses=False), limits)
        try:
            server = await asyncio.get_running_loop().create_server(proxy.connection, self.config.host,
                                                                    self.config.port, backlog=1024)
        except OSError as err:
            log(f"error: listen.port: cannot listen on {self.config.host}:{self.config.port} ({err.strerror})")
            return EXIT_LISTEN
        port = server.sockets[0].getsockname()[1]
        base = f"http://{self.config.host}:{port}"
        self.state = {"schema": STATE_SCHEMA, "pid": os.getpid(), "host": self.config.host, "port": port, "url": base,
                      "models": {alias: f"{base}/{alias}/v1" for alias in self.pools}, "started_at": self.started_at}
        self.publish("serving")
        gc.freeze()  # the long-lived objects made so far are never collected: shorter GC passes
        log(f"serving {', '.join(self.state['models'].values())}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signo in STOP_SIGNALS:
            loop.add_signal_handler(signo, stop.set)
        loop.add_signal_handler(signal.SIGUSR1, self.write_stats)
        loop.add_signal_handler(signal.SIGUSR2, self.drain)
        if stop_requested(self.received):
            stop.set()  # it landed before the handlers above: it counts all the same
        stall = self.config.stall_timeout_s
        watchdog = asyncio.ensure_future(self.watch(stop, stall)) if stall else None
        sweeper = asyncio.ensure_future(proxy.sweeping())
        writer = asyncio.ensure_future(self.stats_every(stop))
        follower = asyncio.ensure_future(self.follow_routes(stop))
        scraper = asyncio.ensure_future(self.scrape_every(stop)) if config.replica_metrics else None
        await stop.wait()
        if scraper:
            scraper.cancel()
        server.close()
        sweeper.cancel()
        writer.cancel()
        follower.cancel()
        if watchdog:
            watchdog.cancel()
        for pool in self.pools.values():
            for replica in pool.replicas:
                replica.close_idle()
        if config.replica_metrics:
            await self.scrape(FINAL_SCRAPE_S)  # the servers still run: their last counts go in the last stats
        self.write_stats()
        fatal = [s for s in self.stalled if not self._expendable(s["name"])]
        self.publish("stalled" if fatal else "stopped")
        log("stalled: " + ", ".join(s["name"] for s in fatal) if fatal else "stopped")
        return EXIT_STALLED if fatal else 0

    def _expendable(self, name: str) -> bool:
        return any(r.target.expendable for pool in self.pools.values() for r in pool.replicas if r.target.name == name)

    def drain(self) -> None:
        """The attempt is stopping (SIGUSR2): admit nothing new (503 with Retry-After), let what is
        in flight finish, and say `drained` in the state file once nothing is."""
        if self.proxy is None or self.proxy.draining:
            return
        self.proxy.draining = True
        self.draining = asyncio.ensure_future(self._drained())  # kept: a task nobody holds may be collected
        log(f"draining: {self.proxy.in_flight()} request(s) in flight, new ones refused")
        try:
            self.publish("draining")
        except OSError as err:
            log(f"error: state_path: cannot write ({err.strerror})")

    async def _drained(self) -> None:
        while self.proxy is not None and self.proxy.in_flight():
            await asyncio.sleep(0.05)
        try:
            self.publish("drained")
        except OSError as err:
            log(f"error: state_path: cannot write ({err.strerror})")
        log("drained: nothing in flight")

    async def follow_routes(self, stop: asyncio.Event) -> None:
        from dd_slurm.gateway.routes import POLL_S, Follower

        follower = Follower(self.config.routes_path, self.pools.values(), log)
        while not stop.is_set():
            follower.poll()
            await asyncio.sleep(POLL_S)

    async def watch(self, stop: asyncio.Event, timeout: float) -> None:
        """Every replica with requests in flight and no progress for `timeout`: an expendable one
        leaves rotation (the supervisor loses it); any other ends the gateway (EXIT_STALLED)."""
        interval = min(1.0, timeout / 4)
        while not stop.is_set():
            await asyncio.sleep(interval)
            now = self.clock.monotonic()
            found = [(pool, r) for pool in self.pools.values() for r in pool.stalled(now, timeout)]
            self.stalled += [{"alias": pool.alias, "deployment": r.target.deployment, "replica": r.target.replica,
                              "name": r.target.name, "base_url": r.target.base_url, "inflight": r.inflight,
                              "silent_s": round(now - r.progress, 3)} for pool, r in found]
            for pool, replica in found:
                pool.take_out(replica, "stalled")
            if any(not r.target.expendable for _pool, r in found):
                stop.set()


def raise_open_files_limit(wanted: int) -> None:
    """Every client and replica connection is a descriptor: the soft limit goes up to what the
    connection cap needs, within the hard limit (connections past the cap are refused, not failed)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def serve(config: GatewayConfig, clock: Clock | None = None, environ: Mapping[str, str] | None = None,
          received: Sequence[int] = ()) -> int:
    """`received`: the stop signals recorded so far, still being appended to until the loop's own
    handlers are installed (then checked once)."""
    service = Service(config, clock or Clock(), os.environ if environ is None else environ, received)
    return asyncio.run(service.run())
