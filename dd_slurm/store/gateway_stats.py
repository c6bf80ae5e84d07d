"""The gateway's accounting (`gateway-stats.json`, schema 1): per alias and per replica, counters,
peaks and latency quantiles, written atomically by the gateway (mode 0644) and read by `inspect`.

The gateway builds the document (gateway/stats.py); `write_stats` structures it before it lands,
so a file that a reader would refuse is never written.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.converter import CONVERTER, choice, mapping_of, read_record_file, register_omitting, register_record

SCHEMA = 1


@attrs.frozen(kw_only=True)
class LatencySummary:
    count: int
    p50_ms: Optional[float]
    p99_ms: Optional[float]


@attrs.frozen(kw_only=True)
class ServerCounts:
    """What the replica's own /metrics said last (vLLM's or SGLang's names): tokens since it
    started (across its restarts), requests running and waiting, and when (wall seconds)."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    running: float = 0.0
    waiting: float = 0.0
    at: float = 0.0


@attrs.frozen(kw_only=True)
class ReplicaStats:
    deployment: str
    replica: int
    max_inflight: int
    inflight: int
    requests: int
    responses: Mapping[str, int]  # status class (2xx) -> count
    errors: Mapping[str, int]
    peak_inflight: int
    latency: LatencySummary
    base_url: Optional[str] = None  # absent from answers given over the network
    server: Optional[ServerCounts] = None  # absent while the replica's /metrics has not answered


@attrs.frozen(kw_only=True)
class Rejected:
    """429 answers by cause: the alias's queue was full, or a request waited past queue_timeout_s."""

    queue_full: int
    queue_timeout: int


@attrs.frozen(kw_only=True)
class AliasStats:
    requests: int
    responses: Mapping[str, int]
    errors: Mapping[str, int]
    peak_queue: int
    latency: LatencySummary
    rejected_429: Rejected
    replicas: tuple[ReplicaStats, ...]


@attrs.frozen(kw_only=True)
class Connections:
    """Client connections: open now, refused at max_connections, closed by the header or idle timeout,
    and requests refused while the gateway drained at the attempt's stop."""

    open: int
    refused_at_limit: int
    header_timeout: int
    idle_timeout: int
    refused_draining: int = 0


@attrs.frozen(kw_only=True)
class Window:
    """What the gateway answered over its last `seconds` (up to a minute): all requests, and 2xx."""

    seconds: float
    requests: int
    ok: int
    generation_tokens: Optional[float] = None  # from the replicas' own counters, where they expose them


@attrs.frozen(kw_only=True)
class GatewayStats:
    schema: int
    started_at: float
    written_at: float
    aliases: Mapping[str, AliasStats]
    connections: Optional[Connections] = None  # absent before the listener is up
    window: Optional[Window] = None  # absent until the gateway has served for one stats period


_COUNTS = mapping_of(int)
for _kind in (LatencySummary, Rejected, Connections, Window, ServerCounts):
    register_record(_kind)
register_record(ReplicaStats, responses=_COUNTS, errors=_COUNTS)
register_record(AliasStats, responses=_COUNTS, errors=_COUNTS)
register_record(GatewayStats, schema=choice(SCHEMA), aliases=mapping_of(AliasStats))
register_omitting(ReplicaStats, "base_url", "server")
register_omitting(Window, "generation_tokens")
register_omitting(GatewayStats, "connections", "window")


def stats_json(stats: GatewayStats) -> dict[str, Any]:
    """The record as gateway-stats.json holds it."""
    return CONVERTER.unstructure(stats)


def write_stats(path: Path, document: dict[str, Any]) -> None:
    """The one writer of gateway-stats.json: the gateway's document, structured, atomically."""
    write_json_atomic(path, stats_json(CONVERTER.structure(document, GatewayStats)), mode=0o644)


def read_stats(path: Path) -> Optional[GatewayStats]:
    """gateway-stats.json validated, None when the gateway wrote none; anything else is an
    AttemptDirError naming the file and the first wrong field."""
    return read_record_file(path, GatewayStats, "a gateway stats file")
