"""Normalization: squeue and sacct rows -> one Observation per job or array task (pure).

Rules, in order, for each job or task:
1. sacct has a terminal record: it wins (it carries the exit code), even after `lost`.
2. squeue lists it: squeue's state (the controller is authoritative for live jobs).
3. Neither (or sacct failed): `accounting_lag`, non-terminal, until `deadline_s` after the job was
   last seen (or submitted); after that, `lost`, terminal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Optional

from dd_slurm.scheduler.parse import Row, expand_tasks
from dd_slurm.scheduler.states import ENDING_REASONS, JobState, is_terminal, normalize_state


class Observation(NamedTuple):
    """The observation the README documents (query, status). NamedTuples here, not attrs:
    `status` runs from fresh processes
    and these modules are on its import path."""

    job_id: str
    state: str
    terminal: bool
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    raw_state: Optional[str] = None
    source: str = "none"
    reason: Optional[str] = None

    def to_json(self) -> dict:
        return self._asdict()


class LagClock(NamedTuple):
    """When each job was last seen (or submitted), the reconcile deadline, and now (wall seconds).
    `deadline_s` None: no history (a raw `query`), so a job nobody reports is lost at once
    when sacct answered, and in accounting lag when it did not."""

    now: float
    deadline_s: Optional[float]
    last_seen: Mapping[str, float] = {}

    def expired(self, job_id: str, sacct_answered: bool) -> bool:
        if self.deadline_s is None:
            return sacct_answered
        since = self.last_seen.get(job_id, self.last_seen.get(job_id.split("_")[0], self.now))
        return self.now - since > self.deadline_s


def index_rows(rows: Iterable[Row]) -> dict[str, Row]:
    """Rows keyed by `123`, `123_4` or `123+1`; pending ranges expanded into one key per task."""
    index: dict[str, Row] = {}
    for row in rows:
        if row.is_range:
            for task in expand_tasks(row.task or ""):
                index.setdefault(f"{row.job}_{task}", row)
        else:
            index[_key(row)] = row
    return index


def _key(row: Row) -> str:
    if row.task is not None:
        return f"{row.job}_{row.task}"
    if row.het is not None:
        return f"{row.job}+{row.het}"
    return row.job


def all_live(requested: Iterable[str], squeue_rows: Iterable[Row]) -> bool:
    """True when squeue lists every requested job (or task) by its own id (or its raw id) in a
    non-terminal state. Array parents never qualify: tasks that already left squeue are only in sacct."""
    live: set[str] = set()
    for row in squeue_rows:
        if not row.is_range and not is_terminal(normalize_state(row.raw_state)[0]):
            live.add(_key(row))
            if row.raw:
                live.add(row.raw)
    return all(job in live for job in requested)


def raw_keys(*indexes: Mapping[str, Row]) -> dict[str, str]:
    """Raw job id -> key, for array tasks and het components whose raw id is not their key
    (task `123_2` may be job 125 to Slurm)."""
    return {row.raw: key for index in indexes for key, row in index.items()
            if row.raw and row.raw != key and not row.is_range}


def keys_for(requested: str, *indexes: Mapping[str, str | Row], raw: Mapping[str, str] | None = None) -> list[str]:
    """`123_4` is itself; `123` is the job, or every task/component of it that Slurm reports, or
    else the task or component whose raw id it is."""
    if "_" in requested or any(requested in index for index in indexes):
        return [requested]
    found = {k for index in indexes for k in index if k.split("_")[0].split("+")[0] == requested}
    if not found and raw and requested in raw:
        return [raw[requested]]
    return sorted(found, key=_sort_key) or [requested]


def _sort_key(key: str) -> tuple[int, int]:
    job, _, rest = key.replace("+", "_").partition("_")
    return int(job), int(rest) if rest.isdigit() else -1


def observe(
    requested: Iterable[str],
    squeue: Mapping[str, Row],
    sacct: Optional[Mapping[str, Row]],
    lag: LagClock,
    sacct_error: Optional[str] = None,
) -> list[Observation]:
    """One observation per job/task. `sacct` None means sacct could not answer (`sacct_error`)."""
    accounting = sacct or {}
    raw = raw_keys(squeue, accounting)
    out = []
    for job_id in requested:
        for key in keys_for(job_id, squeue, accounting, raw=raw):
            out.append(observe_one(key, squeue.get(key), accounting.get(key), lag, sacct_error))
    return out


def observe_one(key: str, live: Optional[Row], acct: Optional[Row], lag: LagClock, sacct_error: Optional[str]) -> Observation:
    if acct is not None and is_terminal(normalize_state(acct.raw_state)[0]):
        return from_row(key, acct, "sacct")
    if live is not None:
        return from_row(key, live, "squeue")
    why = f"sacct failed: {sacct_error}" if sacct_error else "in neither squeue nor sacct"
    if acct is not None:
        why = f"sacct says {acct.raw_state} but squeue no longer lists it"
    if lag.expired(key, sacct_error is None):
        window = f" for more than {lag.deadline_s:g}s" if lag.deadline_s is not None else ""
        return Observation(key, JobState.LOST, True, raw_state=acct.raw_state if acct else None, source="none",
                           reason=why + window)
    return Observation(key, JobState.ACCOUNTING_LAG, False, raw_state=acct.raw_state if acct else None,
                       source="none", reason=why)


def from_row(key: str, row: Row, source: str) -> Observation:
    state, detail = normalize_state(row.raw_state)
    terminal = is_terminal(state)
    reason = row.reason if not terminal or row.reason in ENDING_REASONS else None
    if state == "cancelled" and detail:
        reason = f"cancelled {detail}"
    exit_code, signal = (row.exit_code, row.signal) if terminal else (None, None)
    return Observation(key, state, terminal, exit_code, signal, row.raw_state, source, reason)
