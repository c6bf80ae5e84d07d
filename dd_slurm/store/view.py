"""Read-only views of an attempt dir for `status` and `inspect`. Never writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.machine import table as T
from dd_slurm.machine.journal import JOURNAL_NAME, current_state, final_entry, read_journal

PLAN_NAME = "plan.json"
READINESS_NAME = "readiness.json"
ENDPOINTS_NAME = "endpoints.json"
CLEANUP_NAME = "cleanup.json"
PROCESSES_NAME = "processes.json"
RECORD_NAME = "attempt.json"
MANIFEST_NAME = "result-manifest.json"
SUPERVISOR_NAME = "supervisor.json"
GATEWAY_STATS_NAME = "gateway-stats.json"


def attempt_dir(path: str | Path, runs: bool = False) -> Path:
    """An existing attempt dir; with `runs`, a run of shards' dir is accepted too."""
    directory = Path(path)
    if not directory.is_dir():
        raise AttemptDirError(f"{path}: not an attempt directory (it does not exist)")
    if not (directory / PLAN_NAME).is_file():
        raise AttemptDirError(f"{path}: not an attempt directory (no {PLAN_NAME})")
    if not runs and (directory / "run.json").is_file():
        raise AttemptDirError(f"{path}: a run of shards, not one attempt (status and cancel take it; "
                              "otherwise name a shard: dd-slurm list)")
    return directory


def read_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise AttemptDirError(f"{path}: unreadable record ({err})") from None


def attempt_summary(directory: Path) -> dict[str, Any]:
    entries = read_journal(directory / JOURNAL_NAME)
    state = current_state(entries, T.INITIAL)
    end = final_entry(entries) if state == T.TERMINAL else None
    return {
        "id": directory.name,
        "dir": str(directory),
        "state": state,
        "outcome": end["outcome"] if end else None,
        "reason": end.get("reason") if end else None,
    }


def inspect_attempt(directory: Path) -> dict[str, Any]:
    """A superset of `status --json`, read from disk only: `scheduler` is the last persisted
    observation (no scheduler call)."""
    entries = read_journal(directory / JOURNAL_NAME)
    record = read_json(directory / RECORD_NAME)
    observations = (record or {}).get("observations") or []
    last = {k: v for k, v in observations[-1].items() if k != "time"} if observations else None
    return {
        "attempt": attempt_summary(directory),
        "scheduler": last,
        "history": entries,
        "readiness": read_json(directory / READINESS_NAME),
        "endpoints": read_json(directory / ENDPOINTS_NAME),
        "processes": read_json(directory / PROCESSES_NAME),
        "cleanup": read_json(directory / CLEANUP_NAME),
        "result": read_json(directory / MANIFEST_NAME),
        "gateway": read_json(directory / GATEWAY_STATS_NAME),
        "record": record,
    }
