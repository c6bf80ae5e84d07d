"""Read-only views of an attempt dir for `status` and `inspect`. Never writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.machine import table
from dd_slurm.machine.journal import current_state, final_entry, read_journal
from dd_slurm.store import attempt_files as files


def attempt_dir(path: str | Path, runs: bool = False) -> Path:
    """An existing attempt dir; with `runs`, a run of shards' dir is accepted too."""
    directory = Path(path)
    if "\0" in str(path):
        raise AttemptDirError(f"{str(path)[:80]!r}: not an attempt directory (a path cannot hold a NUL byte)")
    if not directory.is_dir():
        raise AttemptDirError(f"{path}: not an attempt directory (it does not exist)")
    if not (directory / files.PLAN).is_file():
        raise AttemptDirError(f"{path}: not an attempt directory (no {files.PLAN})")
    if not runs and (directory / files.RUN_RECORD).is_file():
        raise AttemptDirError(f"{path}: a run of shards, not one attempt (status and cancel take it; "
                              "otherwise name a shard: dd-slurm list)")
    return directory


def read_json(path: Path, expect: type | tuple[type, ...] = dict) -> Optional[Any]:
    """The JSON value in `path` (None when absent); anything unreadable, nested too deeply or not
    of the expected shape is an AttemptDirError naming the file."""
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as err:
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)[:200]
        raise AttemptDirError(f"{path}: unreadable record ({why})") from None
    if not isinstance(value, expect):
        raise AttemptDirError(f"{path}: not a dd-slurm record (a JSON {getattr(expect, '__name__', 'value')} "
                              f"of another shape was expected)")
    return value


def read_cleanup(path: Path) -> Optional[dict[str, Any]]:
    """cleanup.json read back as its typed record (validated: see store/cleanup_report), in its JSON form."""
    from dd_slurm.store.cleanup_report import read_report, report_json

    report = read_report(path)
    return report_json(report) if report is not None else None


def read_endpoints_json(path: Path) -> Optional[dict[str, Any]]:
    """endpoints.json read back as its typed record (validated: see store/endpoints), in its JSON form."""
    from dd_slurm.store.endpoints import endpoints_json, read_endpoints

    endpoints = read_endpoints(path)
    return endpoints_json(endpoints) if endpoints is not None else None


def read_gateway_stats_json(path: Path) -> Optional[dict[str, Any]]:
    """gateway-stats.json read back as its typed record (validated: see store/gateway_stats), in its JSON form."""
    from dd_slurm.store.gateway_stats import read_stats, stats_json

    stats = read_stats(path)
    return stats_json(stats) if stats is not None else None


def read_readiness(path: Path) -> Optional[dict[str, Any]]:
    """readiness.json validated (store/readiness_shape: the same checks as its record's converter),
    in its JSON form; None when there is none."""
    from dd_slurm.store.readiness_shape import checked_readiness

    data = read_json(path)
    return None if data is None else checked_readiness(data, str(path))


def checked_journal(path: Path) -> list[dict[str, Any]]:
    """Journal entries, each an object with a known kind, known states and a known outcome."""
    try:
        entries = read_journal(path)
    except RecursionError:
        raise AttemptDirError(f"{path}: an entry is nested too deeply") from None
    except UnicodeDecodeError as err:
        raise AttemptDirError(f"{path}: not UTF-8 text (byte {err.start})") from None
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or entry.get("kind") not in ("transition", "internal", "event"):
            raise AttemptDirError(f"{path}:{number}: not a journal entry")
        if entry.get("from") not in table.STATES or entry.get("to") not in table.STATES:
            raise AttemptDirError(f"{path}:{number}: unknown state {str(entry.get('to'))[:40]!r}")
        if entry.get("outcome") is not None and entry.get("outcome") not in table.OUTCOMES:
            raise AttemptDirError(f"{path}:{number}: unknown outcome {str(entry.get('outcome'))[:40]!r}")
        if not isinstance(entry.get("reason") or "", str):
            raise AttemptDirError(f"{path}:{number}: reason must be text")
    return entries


def attempt_summary(directory: Path, entries: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """id, dir, state, outcome and reason from the journal (`entries`: already read and checked)."""
    if entries is None:
        entries = checked_journal(directory / files.JOURNAL)
    state = current_state(entries, table.INITIAL)
    end = final_entry(entries) if state == table.TERMINAL else None
    return {
        "id": directory.name,
        "dir": str(directory),
        "state": state,
        "outcome": end["outcome"] if end else None,
        "reason": end.get("reason") if end else None,
    }


def read_attempt_record(directory: Path) -> Optional[dict[str, Any]]:
    """attempt.json checked (store/attempt_record), in its JSON form; None when absent."""
    from dd_slurm.store.attempt_record import checked_record

    path = directory / files.RECORD
    data = read_json(path)
    return None if data is None else checked_record(data, path)


def inspect_attempt(directory: Path) -> dict[str, Any]:
    """A superset of `status --json`, read from disk only: `scheduler` is the last persisted
    observation (no scheduler call)."""
    entries = checked_journal(directory / files.JOURNAL)
    record = read_attempt_record(directory)
    observations = (record or {}).get("observations") or []
    last = {k: v for k, v in observations[-1].items() if k != "time"} if observations else None
    return {
        "attempt": attempt_summary(directory),
        "scheduler": last,
        "history": entries,
        "readiness": read_readiness(directory / files.READINESS),
        "endpoints": read_endpoints_json(directory / files.ENDPOINTS),
        "processes": read_json(directory / files.PROCESSES, (dict, list)),
        "cleanup": read_cleanup(directory / files.CLEANUP),
        "result": read_json(directory / files.RESULT_MANIFEST),
        "images": read_json(directory / files.IMAGES),
        "gateway": read_gateway_stats_json(directory / files.GATEWAY_STATS),
        "record": record,
    }
