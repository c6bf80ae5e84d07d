"""`status`'s `progress` while the client runs: the gateway's live stats (gateway-stats.json,
rewritten every few seconds) and the records in the result file so far. Read from disk only."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from dd_slurm.store import attempt_files as files

BLOCK = 1 << 20
BLANK_START = re.compile(rb"\n[ \t\r\x0b\x0c\n]")  # where a whitespace-only line could begin


def complete_lines(path: Path, block: int = BLOCK) -> Optional[int]:
    """Records of a JSON lines file as it is being written: its newline-terminated lines that are
    not blank (as the result check counts them); None when it is not a regular file (yet)."""
    if path.is_symlink() or not path.is_file():  # never a FIFO a reader would block on
        return None
    try:
        with open(path, "rb") as handle:
            count, tail = 0, b"\n"
            for chunk in iter(lambda: handle.read(block), b""):
                lines = tail + chunk
                end = lines.rfind(b"\n") + 1
                count += records_in(lines[:end])
                tail = lines[end - 1:]
            return count
    except OSError:
        return None


def records_in(lines: bytes) -> int:
    """Non-blank lines in `lines`, which starts with a newline (not itself a line) and ends with
    one. Newlines are counted at memory speed; lines are looked at only where a blank one could be."""
    count = lines.count(b"\n") - 1
    if BLANK_START.search(lines):
        count = sum(1 for line in lines.split(b"\n")[1:-1] if line.strip())
    return max(count, 0)


def client_started(entries: list[dict[str, Any]]) -> Optional[float]:
    """When the journal's `entries` last moved to `client`."""
    moves = [e for e in entries if e.get("kind") == "transition"]
    started = [e.get("ts") for e in moves if e.get("to") == "client"]
    return started[-1] if started and isinstance(started[-1], (int, float)) else None


def gateway_counts(attempt_dir: Path) -> dict[str, Any]:
    """Totals over every alias from the gateway's stats file, and the last minute's request rate."""
    from dd_slurm.control.stats_totals import gateway_totals

    return gateway_totals(attempt_dir / files.GATEWAY_STATS)


def result_settings(attempt_dir: Path) -> tuple[str, str, Optional[int]]:
    """The plan's client.result path, format and target (min_records when > 0), checked by the
    plan's own rules without structuring the whole plan (a fresh `status` process every few seconds:
    the plan's records and their structuring are a sixth of its time). AttemptDirError otherwise."""
    import json

    from dd_slurm.errors import AttemptDirError
    from dd_slurm.plan import checks, fields

    try:
        result = json.loads((attempt_dir / files.PLAN).read_bytes())["client"]["result"]
        path, kind, target = result["path"], result["format"], result.get("min_records", 0)
        checks.result_path(path)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise AttemptDirError(f"{attempt_dir / files.PLAN}: client.result cannot be read ({err})") from None
    if kind not in fields.RESULT_FORMATS or type(target) is not int or target < 0:
        raise AttemptDirError(f"{attempt_dir / files.PLAN}: client.result is not a valid result")
    return path, kind, target or None


def progress(attempt_dir: Path, now: float, entries: Optional[list[dict[str, Any]]] = None,
             record: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """requests, ok, rejected_429, errors, req_per_s (the last minute), replicas_serving, records
    (complete JSON lines so far), records_target (min_records when > 0), eta_s (from the records'
    rate since the client started), tokens_out and tokens_per_s (the last minute) from the
    replicas' own counters (null where no replica exposes them). `entries` (the checked journal)
    and `record` (attempt.json): what the caller has read already."""
    from dd_slurm.plan.fields import expand
    from dd_slurm.store.attempt_record import read_record
    from dd_slurm.store.view import checked_journal

    path, kind, target = result_settings(attempt_dir)
    shard = (record if record is not None else read_record(attempt_dir)).get("shard") or {}
    name = expand(path, {"shard_index": str(shard.get("index", 0)), "num_shards": str(shard.get("count", 1))})
    records = complete_lines(attempt_dir / files.RESULTS_DIR / name) if kind == "jsonl" else None
    started = client_started(entries if entries is not None else checked_journal(attempt_dir / files.JOURNAL))
    eta = None
    if records and target and records < target and started is not None and now > started:
        eta = round((target - records) / (records / (now - started)), 1)
    return {**gateway_counts(attempt_dir), "records": records, "records_target": target, "eta_s": eta}


def progress_line(found: dict[str, Any]) -> str:
    """`1,240/10,000 records  31 req/s  429s 2%  ETA 0:47:10`: what is known of it."""
    from dd_slurm.control.watch import hms

    parts = []
    if found.get("records") is not None:
        target = found.get("records_target")
        parts.append(f"{found['records']:,}" + (f"/{target:,}" if target else "") + " records")
    if found.get("req_per_s") is not None:
        parts.append(f"{found['req_per_s']:.0f} req/s")
    if found.get("tokens_per_s") is not None:
        rate = found["tokens_per_s"]
        parts.append(f"{rate / 1000:.1f}k tok/s" if rate >= 1000 else f"{rate:.0f} tok/s")
    if found.get("requests") and found.get("rejected_429"):
        parts.append(f"429s {100 * found['rejected_429'] / found['requests']:.0f}%")
    if found.get("eta_s") is not None:
        parts.append(f"ETA {hms(found['eta_s'])}")
    return "  ".join(parts)
