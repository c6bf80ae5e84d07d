"""The workspace view (`dd-slurm list`): every attempt and shard, one scheduler round for all.

Every attempt under `attempts/` is read from disk; those still in need of a scheduler answer are
observed together with ONE squeue and at most ONE sacct call (the commands client batches the
ids); an attempt whose terminal sacct observation is persisted needs no call, since that answer
can never change. New terminal observations are persisted (as `status` records them), with one
file-system sync for all. A settled row (attempt done, terminal sacct answer persisted) is final,
so it is kept in `attempts/.list-cache.json` and not read again; the cache is only a view, each
row checked for shape, and a row that does not fit is read from the attempt dir instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, sync_filesystem, write_atomic
from dd_slurm.store.attempt_record import read_record, update_record

CACHE_NAME = ".list-cache.json"
ROW_KEYS = ("id", "run", "shard", "state", "outcome", "reason", "job_id", "job_state", "effective", "since")


class Entry(NamedTuple):
    """One attempt as read from its dir (before the scheduler is asked)."""

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
    def submitted_at(self) -> Optional[float]:
        return self.record.get("submitted_at")  # validated by read_record (absent from a problem row)

    @property
    def shard(self) -> Optional[dict]:
        return self.record.get("shard")


def journal_summary(path: Path) -> tuple[str, Optional[str], Optional[str]]:
    """(state, outcome, reason): the last transition's target, and the outcome it carried once done.
    The lines are parsed as one JSON array (one C call); a bad line is then named."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return "staged", None, None
    try:
        entries = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line)
            except ValueError:
                raise AttemptDirError(f"{path}:{number}: not a JSON journal entry") from None
        raise AttemptDirError(f"{path}: not a JSON journal") from None
    state, outcome, reason = "staged", None, None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("kind") == "transition":
            state = entry.get("to", state)
            if entry.get("outcome"):
                outcome, reason = entry["outcome"], entry.get("reason")
    return (state, outcome, reason) if state == "done" else (state, None, None)


def read_entry(directory: Path, runs: Optional[dict[str, dict]] = None) -> Entry:
    """Journal summary plus the attempt record (a shard's job id comes from its run; `runs`
    caches run records); a malformed file raises AttemptDirError naming it."""
    state, outcome, reason = journal_summary(directory / files.JOURNAL)
    return Entry(directory.name, directory, state, outcome, reason, read_record(directory, runs))


def entry_or_problem(directory: Path, runs: dict[str, dict]) -> Entry:
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
    """Observation per attempt id: persisted ones as they are, the rest from one query round per
    cluster (each asked with the tools its attempts were submitted with)."""
    found: dict[str, Optional[dict]] = {}
    asking: dict[str, Entry] = {}
    for entry in entries:
        known = settled(entry.record) if entry.job_id else None
        if known is not None or not entry.job_id:
            found[entry.id] = known
        else:
            asking[entry.job_id] = entry
    by_cluster: dict[str, dict[str, Entry]] = {}  # one query round per cluster the attempts went to
    for job_id, entry in asking.items():
        by_cluster.setdefault(json.dumps(entry.record.get("cluster"), sort_keys=True), {})[job_id] = entry
    for group in by_cluster.values():
        found.update(_observe_group(group, commands.for_cluster(next(iter(group.values())).record.get("cluster")), now))
    _persist([(e, observed) for e in asking.values() if (observed := found.get(e.id)) and observed.get("terminal")], now)
    return found


def _observe_group(asking: dict[str, Entry], commands: Any, now: float) -> dict[str, Optional[dict]]:
    """One query round for attempts of one cluster, by attempt id."""
    from dd_slurm.scheduler.observe import LagClock, index_rows, observe

    ids = list(asking)
    deadline = min(float(e.record.get("reconcile_deadline_s") or 300.0) for e in asking.values())
    seen = {j: e.record.get("last_seen") or e.record.get("submitted_at") or now for j, e in asking.items()}
    submitted = [e.submitted_at for e in asking.values()]
    since = None if None in submitted else min(t for t in submitted if t is not None)
    result = commands.query(ids, since)
    sacct = index_rows(result.sacct) if result.sacct is not None else None
    return {asking[obs.job_id].id: obs.to_json()
            for obs in observe(ids, index_rows(result.squeue), sacct, LagClock(now, deadline, seen), result.sacct_error)
            if obs.job_id in asking}


def _persist(pairs: list[tuple[Entry, dict]], now: float) -> None:
    """Append each terminal observation to its attempt record (locked, atomic), then sync once.
    Only terminal ones: they let the next round skip the attempt; rewriting a thousand records
    per call for live jobs would cost more than it tells."""
    for entry, obs in pairs:
        with update_record(entry.dir, durable=False) as record:
            record["observations"].append({"time": now, **obs})
            if obs["source"] != "none":
                record["last_seen"] = now
    if pairs:
        sync_filesystem(pairs[0][0].dir)


def reread_ended(entries: list[Entry], found: dict[str, Optional[dict]], runs: dict[str, dict]) -> list[Entry]:
    """Disk is read before the scheduler is asked: a job that ended in between is terminal while
    its journal said `cleanup`. Read those journals again, so a finished attempt is not reported
    as lost."""
    return [entry_or_problem(e.dir, runs) if e.state not in ("done", "unreadable")
            and (found.get(e.id) or {}).get("terminal") else e for e in entries]


def effective(entry: Entry, obs: Optional[dict]) -> Optional[dict]:
    """What `status` says (status.effective) for a workspace entry."""
    from dd_slurm.control.status import effective as status_effective

    return status_effective({"state": entry.state, "outcome": entry.outcome, "reason": entry.reason,
                             "dir": str(entry.dir)}, obs)


def row(entry: Entry, obs: Optional[dict]) -> dict[str, Any]:
    shard = entry.shard or {}
    since = entry.record.get("submitted_at") or entry.record.get("staged_at")
    out = {"id": entry.id, "run": shard.get("run_id"), "shard": shard.get("index"), "state": entry.state,
           "outcome": entry.outcome, "reason": entry.reason, "job_id": entry.job_id,
           "job_state": obs["state"] if obs else None, "effective": effective(entry, obs),
           "since": since if isinstance(since, (int, float)) else None}
    if entry.state == "unreadable":
        out["error"] = entry.record.get("error")
    return out


def _cached_rows(root: Path) -> dict[str, dict]:
    try:
        data = json.loads((root / CACHE_NAME).read_text())
        rows = data["rows"] if data.get("schema") == 1 else {}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return {}
    return {k: r for k, r in rows.items() if isinstance(r, dict) and tuple(sorted(r)) == tuple(sorted(ROW_KEYS))
            and r["id"] == k and r["state"] == "done" and isinstance(r["effective"], dict)} \
        if isinstance(rows, dict) else {}


def list_workspace(workspace: Path, commands: Any, now: float) -> dict[str, Any]:
    """Rows in id order; `age_s` from submission (or staging)."""
    root = Path(workspace) / "attempts"
    try:
        names = sorted(e.name for e in os.scandir(root) if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        names = []
    cached = _cached_rows(root)
    runs: dict[str, dict] = {}
    entries = [entry_or_problem(root / name, runs) for name in names if name not in cached]
    found = observe_entries(entries, commands, now)
    fresh = {e.id: row(e, found.get(e.id)) for e in reread_ended(entries, found, runs)}
    newly = {e.id: fresh[e.id] for e in entries if fresh[e.id]["state"] == "done" and settled(e.record)}
    if newly:
        keep = {name: cached[name] for name in names if name in cached}
        write_atomic(root / CACHE_NAME, dump_json({"schema": 1, "rows": {**keep, **newly}}), durable=False)
    rows = [cached.get(name) or fresh[name] for name in names]
    for r in rows:
        r["dir"], r["age_s"] = str(root / r["id"]), round(now - r["since"], 3) if r["since"] is not None else None
    return {"workspace": str(workspace), "attempts": rows}


def list_text(view: dict[str, Any]) -> str:
    """One row per attempt, each column as wide as its widest cell (an 80-column terminal holds a
    typical workspace: `demo-20261206T120000-1a2b3c  done failed (client_failed) 41 2h`)."""
    rows = [("ATTEMPT", "STATE", "OUTCOME", "JOB", "AGE")]
    for r in view["attempts"]:
        eff = r["effective"]
        outcome = f"{eff['outcome']} ({eff['reason']})" if eff else "-"
        job = (r["job_id"] or "-") + (f" {r['job_state']}" if r["job_state"] and not eff else "")
        rows.append((r["id"], r["state"], outcome, job, _age(r["age_s"])))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{row[0].ljust(widths[0])}  " + " ".join([*(c.ljust(w) for c, w in zip(row[1:4], widths[1:])), row[4]])
             for row in rows]
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
