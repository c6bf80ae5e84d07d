"""Where an attempt's time went (pure: records in, text out; `load` and `write_timeline` read and
write the attempt dir).

Phases come from the records the attempt already keeps: queue wait from the submission time
(attempt.json) to the job's start (the supervisor's process start, supervisor.json: the batch
script execs it); every state from the journal's transitions (verification is the time from the
job's start until the machine left `verified`); each deployment's load from its first process's
launch (processes.json), or from entering `deploying` when later (its steps launch held beside the
preflight), to the first healthy probe (readiness.json); each node's weights staging from its
journal event (the seconds it took, ending when the node said it ended). The GPU time spent before
the client started is the job's GPUs times the time from the job's start to the client's start.
Records that are missing or malformed leave their rows out; nothing here raises on bad input.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.store import attempt_files as files

PHASES = {"preflight": "preflight", "deploying": "deploying", "ready": "ready", "client": "client",
          "finalize": "finalize", "cleanup": "cleanup"}


@attrs.frozen
class Row:
    name: str
    start: float
    end: float
    section: str  # "scheduler", "attempt" or "deployments"
    note: str = ""

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)


@attrs.frozen
class Timeline:
    attempt_id: str
    origin: float
    rows: tuple[Row, ...]
    gpus: int
    gpu_seconds_before_client: Optional[float]
    client_started: bool

    def to_json(self) -> dict[str, Any]:
        return {"attempt_id": self.attempt_id, "origin": self.origin, "gpus": self.gpus,
                "gpu_seconds_before_client": self.gpu_seconds_before_client, "client_started": self.client_started,
                "rows": [{"name": r.name, "section": r.section, "start": r.start, "end": r.end,
                          "seconds": round(r.seconds, 3), "note": r.note or None} for r in self.rows]}


def _num(value: Any) -> Optional[float]:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _moves(entries: Any) -> list[tuple[str, str, float]]:
    out = []
    for e in entries if isinstance(entries, list) else []:
        e = _dict(e)
        ts = _num(e.get("ts"))
        if e.get("kind") == "transition" and isinstance(e.get("from"), str) and isinstance(e.get("to"), str) \
                and ts is not None:
            out.append((e["from"], e["to"], ts))
    return out


def state_rows(moves: list[tuple[str, str, float]], job_start: Optional[float]) -> list[Row]:
    """One row per visited state; `staged` and `verified` together are verification."""
    rows = []
    entered: dict[str, float] = {}
    for source, dest, ts in moves:
        if source in PHASES and source in entered and source != dest:
            rows.append(Row(PHASES[source], entered.pop(source), ts, "attempt"))
        leaves_verification = source == "verified" or (source == "staged" and dest != "verified")
        if leaves_verification and job_start is not None:
            rows.append(Row("verification", job_start, ts, "attempt"))
        if dest != source:
            entered[dest] = ts
    return rows


def _ready_at(dep: dict) -> Optional[float]:
    ready_at = _num(dep.get("ready_at"))
    if ready_at is not None:
        return ready_at
    probe = _dict(dep.get("last_probe"))
    return _num(probe.get("time")) if probe.get("ok") is True and dep.get("ready") else None


def load_rows(readiness: Any, processes: Any, until: Optional[float], since: Optional[float] = None) -> list[Row]:
    """Each deployment from its first process's launch, or from `since` (entering `deploying`,
    which releases the steps launched held beside the preflight) when that is later, to its first
    healthy probe (or, never ready, to the end of `deploying`)."""
    procs = [_dict(p) for p in _dict(processes).get("processes") or [] if isinstance(p, dict)]
    rows = []
    for name, dep in sorted(_dict(_dict(readiness).get("deployments")).items()):
        ranks = range(max(1, len(_dict(dep).get("nodes") or ())))  # a record without nodes: the leader
        steps = {files.deploy_step(str(name), rank) for rank in ranks}
        starts = [s for p in procs if p.get("name") in steps and (s := _num(p.get("started_at")))]
        if not starts:
            continue
        ready = _ready_at(_dict(dep))
        end = ready if ready is not None else until
        if end is not None:
            start = max(min(starts), since) if since is not None else min(starts)
            rows.append(Row(f"{name} load", start, end, "deployments",
                            "launch to ready" if ready is not None else "never ready"))
    return rows


def replica_rows(entries: Any, until: Optional[float]) -> list[Row]:
    """Each lost replica, from its loss to its restart serving again (or to `until`: never back)."""
    events = [e for e in (entries if isinstance(entries, list) else []) if _dict(e).get("kind") == "event"
              and isinstance(e.get("replica"), str) and _num(e.get("ts")) is not None]
    rows = []
    for index, lost in enumerate(events):
        if lost.get("trigger") != "lose_replica":
            continue
        back = next((e for e in events[index + 1:] if e.get("replica") == lost["replica"]
                     and e.get("trigger") in ("restart_replica", "lose_replica")), None)
        restarted = back is not None and back.get("trigger") == "restart_replica"
        end = _num(back.get("ts")) if restarted and back else until
        if end is not None:
            why = str(lost.get("reason") or "lost")
            rows.append(Row(f"{lost['replica']} lost", _num(lost["ts"]) or end, end, "deployments",
                            f"{why}; serving again after restart {back.get('restart')}" if restarted and back
                            else f"{why}; not back"))
    return rows


def staging_rows(entries: Any) -> list[Row]:
    """Each node's weights staging (journal `weights_staged`): bytes, and copied or reused."""
    rows = []
    for e in entries if isinstance(entries, list) else []:
        e = _dict(e)
        end, seconds, size = _num(e.get("ended_at")) or _num(e.get("ts")), _num(e.get("seconds")), _num(e.get("bytes"))
        if e.get("trigger") != "weights_staged" or end is None or seconds is None or size is None:
            continue
        how = "reused an earlier copy" if e.get("reused") is True else \
            f"copied, {size / max(seconds, 1e-3) / 1e6:,.0f} MB/s"
        rows.append(Row(f"weights on {e.get('node')}", end - seconds, end, "deployments", f"{size / 1e6:,.1f} MB {how}"))
    return rows


def build(attempt_id: str, record: Any, entries: Any, readiness: Any, processes: Any, supervisor: Any,
          plan: Any) -> Timeline:
    record, moves = _dict(record), _moves(entries)
    job_start = _num(_dict(supervisor).get("started_at"))
    submitted = _num(record.get("submitted_at"))
    rows = []
    if submitted is not None and job_start is not None and job_start >= submitted:
        rows.append(Row("queue wait", submitted, job_start, "scheduler", "submit to start"))
    rows += state_rows(moves, job_start)
    deploying_end = next((ts for s, d, ts in moves if s == "deploying"), moves[-1][2] if moves else None)
    deploying_start = next((ts for s, d, ts in moves if d == "deploying" and s != d), None)
    if deploying_start is not None:  # steps launched held beside a failed preflight never loaded
        rows += load_rows(readiness, processes, deploying_end, deploying_start)
    rows += staging_rows(entries)
    rows += replica_rows(entries, next((ts for s, d, ts in moves if d == "cleanup"), moves[-1][2] if moves else None))
    rows.sort(key=lambda r: (r.start, r.section != "attempt"))
    job = _dict(_dict(plan).get("job"))
    nodes, per_node = _num(job.get("nodes")), _num(job.get("gpus_per_node"))
    gpus = int(nodes * per_node) if nodes and per_node else 0
    client_at = next((ts for s, d, ts in moves if d == "client"), None)
    until = client_at if client_at is not None else (moves[-1][2] if moves else None)
    gpu_seconds = gpus * (until - job_start) if job_start is not None and until is not None else None
    origin = submitted if submitted is not None else (job_start if job_start is not None else
                                                     (rows[0].start if rows else 0.0))
    return Timeline(attempt_id, origin, tuple(rows), gpus, gpu_seconds, client_at is not None)


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def gpu_line(tl: Timeline) -> str:
    if tl.gpu_seconds_before_client is None:
        return "GPU time before the client: unknown (no job start recorded)"
    when = "before the client started" if tl.client_started else "without a client ever starting"
    hours = tl.gpu_seconds_before_client / 3600
    each = duration(tl.gpu_seconds_before_client / tl.gpus if tl.gpus else 0)
    return f"GPU time {when}: {tl.gpus} {'GPU' if tl.gpus == 1 else 'GPUs'} x {each} = {hours:.3f} GPU-hours"


def _total(tl: Timeline) -> Optional[float]:
    return max(r.end for r in tl.rows) - tl.origin if tl.rows else None


def table(tl: Timeline) -> str:
    """A plain table for the terminal: offset from submission, duration, note."""
    lines = [f"where the time went: {tl.attempt_id}", f"  {'phase':<22} {'start':>9} {'took':>9}"]
    for row in tl.rows:
        name = ("  " if row.section == "deployments" else "") + row.name
        lines.append(f"  {name:<22} {'+' + duration(row.start - tl.origin):>9} {duration(row.seconds):>9}"
                     + (f"  {row.note}" if row.note else ""))
    total = _total(tl)
    if total is not None:
        lines.append(f"  {'total':<22} {'':>9} {duration(total):>9}")
    lines.append(gpu_line(tl))
    return "\n".join(lines)


def _label(text: str) -> str:
    return re.sub(r"[:;#,]", " ", text)


def mermaid(tl: Timeline) -> str:
    """A Mermaid gantt chart (GitHub and most Markdown viewers draw it); times are epoch ms."""
    lines = ["gantt", f"  title Where the time went: {_label(tl.attempt_id)}", "  dateFormat x",
             "  axisFormat %H:%M:%S"]
    for section in ("scheduler", "attempt", "deployments"):
        rows = [(i, r) for i, r in enumerate(tl.rows) if r.section == section]
        if rows:
            lines.append(f"  section {section}")
        for index, row in rows:
            start = int(row.start * 1000)
            lines.append(f"  {_label(row.name)} ({duration(row.seconds)}) :t{index}, {start}, "
                         f"{max(int(row.end * 1000), start + 1)}")
    return "\n".join(lines) + "\n"


def markdown(tl: Timeline) -> str:
    rows = [f"| {r.name} | +{duration(r.start - tl.origin)} | {duration(r.seconds)} | {r.note} |" for r in tl.rows]
    return "\n".join([f"# Where the time went: {tl.attempt_id}", "", "| phase | start | took | |", "|---|---|---|---|",
                      *rows, "", gpu_line(tl), "", "```mermaid", mermaid(tl).rstrip(), "```", ""])


def load(attempt_dir: Path) -> Timeline:
    from dd_slurm.machine.journal import read_journal
    from dd_slurm.store.view import read_attempt_record, read_json, read_readiness

    d = Path(attempt_dir)
    return build(d.name, read_attempt_record(d), read_journal(d / files.JOURNAL), read_readiness(d / files.READINESS),
                 read_json(d / files.PROCESSES), read_json(d / files.SUPERVISOR), read_json(d / files.PLAN))


def write_timeline(attempt_dir: Path) -> Optional[Path]:
    """timeline.md in the attempt dir, for the supervisor's last act; never raises on unreadable
    records or an unwritable dir (it returns None): the attempt's outcome is already recorded."""
    from dd_slurm.errors import DdSlurmError
    from dd_slurm.store.atomic import write_atomic

    try:
        path = Path(attempt_dir) / files.TIMELINE
        write_atomic(path, markdown(load(attempt_dir)).encode())
        return path
    except (OSError, DdSlurmError):
        return None
