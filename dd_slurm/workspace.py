"""The workspace view (`dd-slurm list`) and run-level `status`/`cancel`: many attempts, one round.

Every attempt and shard under `attempts/` is read from disk; those still in need of a scheduler
answer are observed together with ONE squeue and at most ONE sacct call (the commands client
batches the ids); an attempt whose terminal sacct observation is already persisted needs no call,
since that answer can never change. New observations are persisted like `status` does, with one
file-system sync for all of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.store.atomic import sync_filesystem
from dd_slurm.store.attempt_record import RECORD_NAME, update_record
from dd_slurm.store.run_record import shard_submission

JOURNAL_NAME = "journal.jsonl"
_FROM_SCHEDULER = {"cancelled": "cancelled", "preempted": "cancelled", "timeout": "timed_out",
                   "deadline": "timed_out"}


class Entry(NamedTuple):
    """One attempt as `list` shows it (before the scheduler is asked)."""

    id: str
    dir: Path
    state: str
    outcome: Optional[str]
    reason: Optional[str]
    record: dict

    @property
    def job_id(self) -> Optional[str]:
        return self.record.get("job_id")

    @property
    def shard(self) -> Optional[dict]:
        shard = self.record.get("shard")
        return shard if isinstance(shard, dict) else None


def read_entry(directory: Path, runs: Optional[dict[str, dict]] = None) -> Entry:
    """State and outcome from the journal (its last transition, and the one that carried the
    outcome), plus the attempt record (a shard's job id from its run, `runs` caching run records);
    a malformed file raises AttemptDirError naming it."""
    state, outcome, reason = "staged", None, None
    try:
        text = (directory / JOURNAL_NAME).read_text()
    except FileNotFoundError:
        text = ""
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entry = json.loads(line)
        except ValueError:
            raise AttemptDirError(f"{directory / JOURNAL_NAME}:{number}: not a JSON journal entry") from None
        if entry.get("kind") == "transition":
            state = entry.get("to", state)
            if entry.get("outcome"):
                outcome, reason = entry["outcome"], entry.get("reason")
    done = state == "done"
    return Entry(directory.name, directory, state, outcome if done else None, reason if done else None,
                 _record(directory, runs if runs is not None else {}))


def _record(directory: Path, runs: dict[str, dict]) -> dict:
    path = directory / RECORD_NAME
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise AttemptDirError(f"{directory}: no {RECORD_NAME} (not staged by dd-slurm?)") from None
    except (OSError, ValueError) as err:
        raise AttemptDirError(f"{path}: unreadable attempt record ({err})") from None
    if not isinstance(record, dict):
        raise AttemptDirError(f"{path}: not an attempt record")
    if record.get("shard") and not record.get("job_id"):
        record.update(shard_submission(directory, record, runs))
    return record


def scan(workspace: Path) -> list[Entry]:
    """Every attempt dir under `attempts/` (staging leftovers `.tmp-*` skipped), sorted by id."""
    root = Path(workspace) / "attempts"
    try:
        names = sorted(e.name for e in os.scandir(root) if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
    runs: dict[str, dict] = {}
    return [_entry_or_problem(root / name, runs) for name in names]


def _entry_or_problem(directory: Path, runs: dict[str, dict]) -> Entry:
    """One damaged attempt is a row saying so, not the end of the listing."""
    try:
        return read_entry(directory, runs)
    except AttemptDirError as err:
        return Entry(directory.name, directory, "unreadable", None, None, {"error": str(err)})


def settled(record: dict) -> Optional[dict]:
    """The persisted terminal sacct observation, if any: it can never change, so no call is needed."""
    observations = record.get("observations") or []
    last = observations[-1] if observations else None
    if isinstance(last, dict) and last.get("terminal") is True and last.get("source") == "sacct":
        return {k: v for k, v in last.items() if k != "time"}
    return None


def observe_entries(entries: Iterable[Entry], commands: Any, now: float) -> dict[str, Optional[dict]]:
    """Observation per attempt id: persisted ones as they are, the rest from one query round."""
    from dd_slurm.scheduler.observe import LagClock, index_rows, observe

    found: dict[str, Optional[dict]] = {}
    asking: dict[str, Entry] = {}
    for entry in entries:
        if not entry.job_id:
            found[entry.id] = None
        elif settled(entry.record) is not None:
            found[entry.id] = settled(entry.record)
        else:
            asking[entry.job_id] = entry
    if not asking:
        return found
    ids = list(asking)
    deadline = min(float(e.record.get("reconcile_deadline_s") or 300.0) for e in asking.values())
    seen = {j: e.record.get("last_seen") or e.record.get("submitted_at") or now for j, e in asking.items()}
    result = commands.query(ids)
    sacct = index_rows(result.sacct) if result.sacct is not None else None
    for obs in observe(ids, index_rows(result.squeue), sacct, LagClock(now, deadline, seen), result.sacct_error):
        if obs.job_id in asking:
            found[asking[obs.job_id].id] = obs.to_json()
    _persist([(asking[j], found[asking[j].id]) for j in ids if found.get(asking[j].id)], now)
    return found


def _persist(pairs: list[tuple[Entry, dict]], now: float) -> None:
    """Append each new observation to its attempt record (locked, atomic), then sync once."""
    for entry, obs in pairs:
        with update_record(entry.dir, durable=False) as record:
            record["observations"].append({"time": now, **obs})
            if obs["source"] != "none":
                record["last_seen"] = now
    if pairs:
        sync_filesystem(pairs[0][0].dir)


def effective(entry: Entry, obs: Optional[dict]) -> Optional[dict]:
    """The attempt's own outcome once done; else, once the job is terminal (or lost), the
    scheduler's verdict with reason `supervisor_lost`; else None (still running)."""
    if entry.state == "done" and entry.outcome:
        return {"outcome": entry.outcome, "reason": entry.reason, "from": "attempt"}
    if obs and obs.get("terminal"):
        return {"outcome": _FROM_SCHEDULER.get(obs["state"], "failed"), "reason": "supervisor_lost",
                "from": "scheduler"}
    return None


def row(entry: Entry, obs: Optional[dict], now: float) -> dict[str, Any]:
    shard = entry.shard
    since = entry.record.get("submitted_at") or entry.record.get("staged_at")
    return {"id": entry.id, "dir": str(entry.dir), "run": shard.get("run_id") if shard else None,
            "shard": shard.get("index") if shard else None, "state": entry.state, "outcome": entry.outcome,
            "reason": entry.reason, "job_id": entry.job_id, "scheduler": obs, "effective": effective(entry, obs),
            "age_s": round(now - since, 3) if isinstance(since, (int, float)) else None,
            "error": entry.record.get("error") if entry.state == "unreadable" else None}


def reread_ended(entries: list[Entry], found: dict[str, Optional[dict]], runs: dict[str, dict]) -> list[Entry]:
    """Disk is read before the scheduler is asked: a job that ended in between is terminal while
    its journal said `cleanup`. Read those journals again so a finished attempt is not reported
    as lost."""
    return [_entry_or_problem(e.dir, runs) if e.state not in ("done", "unreadable")
            and (found.get(e.id) or {}).get("terminal") else e for e in entries]


def list_workspace(workspace: Path, commands: Any, now: float) -> dict[str, Any]:
    entries = scan(workspace)
    found = observe_entries(entries, commands, now)
    entries = reread_ended(entries, found, {})
    return {"workspace": str(workspace), "attempts": [row(e, found.get(e.id), now) for e in entries]}


def list_text(view: dict[str, Any]) -> str:
    lines = [f"{'ATTEMPT':<48} {'STATE':<9} {'OUTCOME':<40} {'JOB':<12} AGE"]
    for r in view["attempts"]:
        eff = r["effective"]
        outcome = f"{eff['outcome']} ({eff['reason']})" if eff else "-"
        job = r["job_id"] or "-"
        if r["scheduler"] and not eff:
            job += f" {r['scheduler']['state']}"
        lines.append(f"{r['id']:<48} {r['state']:<9} {outcome:<40} {job:<12} {_age(r['age_s'])}")
    if len(lines) == 1:
        lines.append("(no attempts)")
    return "\n".join(lines)


def _age(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def run_status(run_dir: Path, commands: Any, now: float) -> dict[str, Any]:
    """`status <run dir>`: every shard's status view, all observed in one round."""
    from dd_slurm.shards import shard_dirs
    from dd_slurm.store.run_record import read_run
    from dd_slurm.store.view import READINESS_NAME, read_json

    record = read_run(run_dir)
    runs = {record["run_id"]: record}
    entries = [read_entry(d, runs) for d in shard_dirs(run_dir)]
    found = observe_entries(entries, commands, now)
    entries = reread_ended(entries, found, runs)
    shards = []
    for entry in entries:
        obs = found.get(entry.id)
        shards.append({"shard": entry.shard["index"] if entry.shard else None,
                       "attempt": {"id": entry.id, "dir": str(entry.dir), "state": entry.state,
                                   "outcome": entry.outcome, "reason": entry.reason},
                       "scheduler": obs, "readiness": read_json(entry.dir / READINESS_NAME),
                       "effective": effective(entry, obs)})
    run = {k: record.get(k) for k in ("run_id", "job_id", "num_shards", "max_concurrent", "submitted_at")}
    return {"run": {**run, "dir": str(run_dir)}, "shards": shards}


def run_status_text(view: dict[str, Any]) -> str:
    run = view["run"]
    lines = [f"run {run['run_id']}: {run['num_shards']} shards, array job {run['job_id'] or '(not submitted)'}"]
    for shard in view["shards"]:
        eff, obs = shard["effective"], shard["scheduler"]
        line = f"  {shard['attempt']['id']}: {shard['attempt']['state']}"
        if obs:
            line += f" | job {obs['job_id']} {obs['state']}"
        if eff:
            line += f" => {eff['outcome']} ({eff['reason']})"
        lines.append(line)
    return "\n".join(lines)


def run_finished(view: dict[str, Any]) -> bool:
    """Nothing left to watch: never submitted, or every shard's job is terminal."""
    return all(s["scheduler"] is None or s["scheduler"].get("terminal") for s in view["shards"])


def cancel_run(run_dir: Path, commands: Any, now: float) -> dict[str, Any]:
    """One `scancel <array job id>`: running shards are cancelled, pending ones never start. The
    request is recorded on the run and on every shard first."""
    from dd_slurm.shards import shard_dirs
    from dd_slurm.store.run_record import read_run, update_run

    job_id = read_run(run_dir).get("job_id")
    if not job_id:
        raise AttemptDirError(f"{run_dir}: never submitted, nothing to cancel")
    with update_run(run_dir) as record:
        record["cancel_requests"].append({"time": now})
    shards = shard_dirs(run_dir)
    for shard in shards:
        with update_record(shard, durable=False) as fresh:
            fresh["cancel_requests"].append({"time": now, "via": "run"})
    sync_filesystem(Path(run_dir))
    commands.cancel(job_id)
    return {"attempt_dir": str(run_dir), "job_id": job_id, "cancel_requested": True,
            "shards": [str(s) for s in shards]}
