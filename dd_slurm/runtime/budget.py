"""Cleanup's one deadline: from the job's end time (SLURM_JOB_END_TIME, else `scontrol show job`),
Slurm's KillWait (`scontrol show config`) and the plan's grace. Both scontrol answers are fetched
once, in the background, a little after the supervisor started (off the start-up's critical
path); cleanup never waits for them and falls back when they have not arrived."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from typing import Optional

import attrs

KILLWAIT_FALLBACK_S = 5.0  # when KillWait is unknown: short, so the report is written before SIGKILL
REPORT_RESERVE_S = 1.0  # kept back for writing the report
STOP_ALLOWANCE_S = 25.0  # beyond the grace: SIGKILL waits and the leftover scans
ENDING_REASONS = ("sigterm", "time_limit")  # scancel or the time limit: Slurm's SIGKILL follows after KillWait
_END = re.compile(r"(?:^|\s)EndTime=(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\s|$)")
_KILLWAIT = re.compile(r"^KillWait\s*=\s*(\d+)\s*sec", re.MULTILINE)


def parse_end_time(text: str) -> Optional[float]:
    """EndTime of `scontrol show job -o` (local time, as scontrol prints it); None if absent."""
    found = _END.search(text)
    return time.mktime(time.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S")) if found else None


def parse_killwait(text: str) -> Optional[float]:
    found = _KILLWAIT.search(text)
    return float(found.group(1)) if found else None


class JobFacts:
    """End time and KillWait of this job, fetched once in a daemon thread."""

    def __init__(self, environ: Mapping[str, str], commands: object, job_id: str, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.end_time: Optional[float] = None
        self.end_source = "unknown"
        self.killwait: Optional[float] = None
        raw = environ.get("SLURM_JOB_END_TIME", "")
        if raw.isdigit():
            self.end_time, self.end_source = float(raw), "SLURM_JOB_END_TIME"
        self._thread = threading.Thread(target=self._fetch, args=(commands, job_id), daemon=True)
        self._thread.start()

    def _fetch(self, commands: object, job_id: str) -> None:
        time.sleep(self.delay_s)
        try:
            if self.end_time is None:
                end = parse_end_time(commands.show("job", job_id))  # type: ignore[attr-defined]
                if end is not None:
                    self.end_time, self.end_source = end, "scontrol"
            self.killwait = parse_killwait(commands.show("config"))  # type: ignore[attr-defined]
        except Exception:
            pass


@attrs.frozen
class Budget:
    deadline: float  # monotonic
    seconds: float
    basis: str

    def left(self, now: float) -> float:
        return max(0.0, self.deadline - now)


def cleanup_budget(reason: str, grace_s: float, now_wall: float, now_mono: float,
                   end_time: Optional[float], killwait: Optional[float], drain_s: float = 0.0) -> Budget:
    """All of cleanup must fit before Slurm's SIGKILL: KillWait after the job's end (which is now,
    for a SIGTERM), or its whole need (the drain first, when there is one) when the job is not
    ending."""
    wait = killwait if killwait is not None else KILLWAIT_FALLBACK_S
    wanted = drain_s + grace_s + STOP_ALLOWANCE_S
    if reason in ENDING_REASONS or (end_time is not None and end_time <= now_wall):
        seconds, basis = min(wanted, wait - REPORT_RESERVE_S), f"the job is ending: KillWait {wait:g}s"
    elif end_time is not None:
        seconds = min(wanted, end_time + wait - now_wall - REPORT_RESERVE_S)
        basis = f"job end in {end_time - now_wall:.0f}s + KillWait {wait:g}s"
    else:
        seconds, basis = wanted, f"job end unknown: grace {grace_s:g}s + {STOP_ALLOWANCE_S:g}s"
    seconds = max(seconds, 1.0)
    return Budget(now_mono + seconds, round(seconds, 3), basis)


def budget_for(session: object, reason: str, grace_s: float, drain_s: float = 0.0) -> Budget:
    """The budget from what the supervisor learned of its job (run.py sets `session.job_facts`)."""
    facts = getattr(session, "job_facts", None)
    clock = session.clock  # type: ignore[attr-defined]
    return cleanup_budget(reason, grace_s, clock.wall(), clock.monotonic(),
                          facts.end_time if facts else None, facts.killwait if facts else None, drain_s)
