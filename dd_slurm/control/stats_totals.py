"""The gateway's totals for `status`'s progress, read from gateway-stats.json field by field.

A fresh `status` process every few seconds reads only the counters it sums; structuring the whole
record (store/gateway_stats) costs it about 10 ms of class and converter set-up. Every value used
is checked as the record's converter checks it (counts: non-negative integers, not booleans;
seconds and tokens: finite numbers); a file without that shape is an AttemptDirError naming it.
tests/control/test_stats_totals.py holds these totals to the ones computed from the full record."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dd_slurm.errors import AttemptDirError

SCHEMA = 1  # store/gateway_stats.SCHEMA (a test holds them equal)
UNKNOWN = {"requests": None, "ok": None, "rejected_429": None, "errors": None, "req_per_s": None,
           "replicas_serving": None, "tokens_out": None, "tokens_per_s": None}


class NotStats(ValueError):
    """A value that is not what gateway-stats.json holds there."""


def count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise NotStats(f"{value!r} is not a count")
    return value


def number(value: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise NotStats(f"{value!r} is not a finite number")
    return float(value)


def mapping(value: Any) -> dict:
    if not isinstance(value, dict):
        raise NotStats("an object was expected")
    return value


def sequence(value: Any) -> list:
    if not isinstance(value, list):
        raise NotStats("a list was expected")
    return value


def gateway_totals(path: Path) -> dict[str, Any]:
    """requests, ok (2xx), rejected_429, errors (5xx), replicas_serving, req_per_s over the last
    minute, and tokens_out / tokens_per_s from the replicas' own counters (null where none has
    them); every value null before the gateway has written the file."""
    from dd_slurm.store.view import read_json

    data = read_json(path)
    if data is None:
        return dict(UNKNOWN)
    try:
        return totals(data)
    except (NotStats, KeyError) as err:
        raise AttemptDirError(f"{path}: not the gateway's stats ({err})") from None


def totals(data: dict) -> dict[str, Any]:
    if data.get("schema") != SCHEMA or type(data.get("schema")) is not int:
        raise NotStats(f"schema {data.get('schema')!r} is not {SCHEMA}")
    aliases = list(mapping(data["aliases"]).values())
    replicas = [mapping(r) for a in aliases for r in sequence(mapping(a)["replicas"])]
    servers = [mapping(r["server"]) for r in replicas if r.get("server") is not None]
    tokens = round(sum(number(s.get("generation_tokens", 0.0)) for s in servers)) if servers else None
    window = mapping(data["window"]) if data.get("window") is not None else None
    seconds = number(window["seconds"]) if window else 0.0
    window_tokens = window.get("generation_tokens") if window else None
    return {"tokens_out": tokens,
            "tokens_per_s": round(number(window_tokens) / seconds, 3)
            if tokens is not None and window_tokens is not None and seconds > 0 else None,
            "requests": sum(count(a["requests"]) for a in aliases),
            "ok": sum(count(mapping(a["responses"]).get("2xx", 0)) for a in aliases),
            "rejected_429": sum(count(mapping(a["rejected_429"])["queue_full"]) +
                                count(a["rejected_429"]["queue_timeout"]) for a in aliases),
            "errors": sum(count(a["responses"].get("5xx", 0)) for a in aliases),
            "req_per_s": round(count(window["requests"]) / seconds, 3) if window and seconds > 0 else None,
            "replicas_serving": len(replicas)}
