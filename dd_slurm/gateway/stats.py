"""Accounting per alias and replica: counters, peaks and a bounded latency histogram."""

from __future__ import annotations

import math
from collections.abc import Iterable
from math import log

BUCKETS_PER_E = 1 / math.log(1.02)  # 2 % wide buckets: bounded memory, quantiles within 2 %


class Latency:
    """Log-bucketed histogram of durations in seconds."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0  # seconds, summed: Prometheus's `_sum`

    def add(self, seconds: float) -> None:
        key = int(log(seconds * 1e6 if seconds > 1e-6 else 1.0) * BUCKETS_PER_E)
        buckets = self.buckets
        buckets[key] = buckets.get(key, 0) + 1
        self.count += 1
        self.total += seconds

    def at_most(self, bounds: Iterable[float]) -> list[int]:
        """For each bound (seconds, ascending), how many durations fell in buckets wholly at or
        below it (Prometheus's cumulative `le` buckets, at the histogram's 2 % resolution)."""
        keys = sorted(self.buckets)
        out, seen, index = [], 0, 0
        for bound in bounds:
            while index < len(keys) and math.exp((keys[index] + 1) / BUCKETS_PER_E) / 1e6 <= bound:
                seen += self.buckets[keys[index]]
                index += 1
            out.append(seen)
        return out

    def quantile(self, q: float) -> float | None:
        """The q-quantile in seconds (bucket midpoint), None when empty."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for key in sorted(self.buckets):
            seen += self.buckets[key]
            if seen >= rank:
                return math.exp((key + 0.5) / BUCKETS_PER_E) / 1e6
        return None  # not reached

    def summary(self) -> dict:
        p50, p99 = self.quantile(0.5), self.quantile(0.99)
        return {"count": self.count, "p50_ms": None if p50 is None else round(p50 * 1000, 3),
                "p99_ms": None if p99 is None else round(p99 * 1000, 3)}


CLASSES = tuple(f"{n}xx" for n in range(10))


def status_class(status: int) -> str:
    return CLASSES[status // 100] if 0 <= status < 1000 else f"{status // 100}xx"


class Counters:
    """What one alias or one replica has seen."""

    __slots__ = ("errors", "latency", "peak", "requests", "responses")

    def __init__(self) -> None:
        self.requests = 0
        self.responses: dict[str, int] = {}
        self.latency = Latency()
        self.errors: dict[str, int] = {}
        self.peak = 0

    def respond(self, status: int, seconds: float) -> None:
        key = status_class(status)
        self.responses[key] = self.responses.get(key, 0) + 1
        self.latency.add(seconds)

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def snapshot(self, peak_name: str) -> dict:
        return {"requests": self.requests, "responses": dict(sorted(self.responses.items())),
                "errors": dict(sorted(self.errors.items())), peak_name: self.peak, "latency": self.latency.summary()}


def report(aliases: Iterable, now_wall: float, started_wall: float, addresses: bool = True) -> dict:
    """The stats document (gateway-stats.json) from the pools' counters; without the replicas'
    addresses unless `addresses`."""
    out = {}
    for pool in aliases:
        entry = pool.stats.snapshot("peak_queue")
        entry["rejected_429"] = {"queue_full": pool.stats.errors.get("queue_full", 0),
                                 "queue_timeout": pool.stats.errors.get("queue_timeout", 0)}
        entry["replicas"] = [{"deployment": r.target.deployment, "replica": r.target.replica,
                              **({"base_url": r.target.base_url} if addresses else {}),
                              "max_inflight": r.target.max_inflight,
                              "inflight": r.inflight, **r.stats.snapshot("peak_inflight"),
                              **({"server": r.server} if r.server is not None else {})} for r in pool.replicas]
        out[pool.alias] = entry
    return {"schema": 1, "started_at": started_wall, "written_at": now_wall, "aliases": out}
