"""Following an attempt (`status --watch`, `submit --wait`): one line per change, a heartbeat at
least every HEARTBEAT_S when nothing changes, and the exit code of the effective outcome.

A line: `[H:MM:SS]  state  deployment:state (time left; last probe error) ...  | job J state (reason)`,
elapsed since submission. The line is printed again only when something other than the clock
moved, or when the heartbeat is due.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional

from dd_slurm.clock import Clock
from dd_slurm.errors import EXIT_ATTEMPT_FAILED, EXIT_OK
from dd_slurm.store.readiness import probe_summary

HEARTBEAT_S = 30.0


def hms(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?:??:??"
    whole = max(int(seconds), 0)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def outcome_of(view: dict[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """(outcome, reason): the effective outcome when the view carries one, else the attempt's."""
    effective = view.get("effective")
    if effective:
        return effective.get("outcome"), effective.get("reason")
    return view["attempt"].get("outcome"), view["attempt"].get("reason")


def exit_code(view: dict[str, Any]) -> int:
    return EXIT_OK if outcome_of(view)[0] == "succeeded" else EXIT_ATTEMPT_FAILED


def _deployment(name: str, dep: dict[str, Any], state: str, now: float) -> tuple[str, str]:
    """(what changes only with events, the full text with the time left)."""
    text = f"{name}:{dep.get('state')}"
    if state != "deploying" or dep.get("state") not in ("pending", "starting"):
        return text, text
    error = probe_summary(dep.get("last_probe"))
    stable = text + (f" (probe: {error})" if error else "")
    deadline = dep.get("deadline")
    extras = ([f"{hms(deadline - now)} left"] if isinstance(deadline, (int, float)) else []) + \
        ([f"probe: {error}"] if error else [])
    return stable, text + (f" ({'; '.join(extras)})" if extras else "")


def progress(view: dict[str, Any], now: float) -> tuple[str, str]:
    """(signature, line without the elapsed prefix) for one observation."""
    attempt = view["attempt"]
    stable, full = [f"{attempt['state']:<9}"], [f"{attempt['state']:<9}"]
    deployments = (view.get("readiness") or {}).get("deployments") or {}
    if deployments:
        parts = [_deployment(name, dep, attempt["state"], now) for name, dep in sorted(deployments.items())]
        stable.append(" ".join(p[0] for p in parts))
        full.append(" ".join(p[1] for p in parts))
    staging = view.get("staging")
    if staging:
        copying = [n for n in staging["nodes"] if n not in staging["staged"]]
        text = f"weights: staging on {','.join(copying)}" if copying else "weights: staged"
        stable.append(text)
        full.append(text)
    obs = view.get("scheduler")
    if obs:
        job = f"| job {obs['job_id']} {obs['state']}" + (f" ({obs['reason']})" if obs.get("reason") else "")
        stable.append(job)
        full.append(job)
    outcome, reason = outcome_of(view)
    if outcome:
        end = f"=> {outcome} ({reason}), exit {exit_code(view)}"
        stable.append(end)
        full.append(end)
    return "  ".join(stable), "  ".join(full) + progress_below(view)


def progress_below(view: dict[str, Any]) -> str:
    """The client's progress on a line of its own under the state line (it moves every round: it
    is shown when a line is printed, never a reason to print one)."""
    if not view.get("progress"):
        return ""
    from dd_slurm.control.progress import progress_line

    shown = progress_line(view["progress"])
    return f"\n{' ' * 11}{shown}" if shown else ""


def finished(view: dict[str, Any]) -> bool:
    """Stop once there is no job to watch, the job has ended (the attempt is then done, or never
    will be), or the outcome was derived from the scheduler. A scheduler that could not answer
    this round is asked again."""
    scheduler = view.get("scheduler")
    if scheduler is None:
        return not view.get("scheduler_error")
    if scheduler.get("terminal"):
        return True
    return (view.get("effective") or {}).get("from") == "scheduler"


def stop_notes(view: dict[str, Any]) -> list[str]:
    from dd_slurm.control.report import disagreement

    notes = ["not submitted: nothing to watch"] if view.get("scheduler") is None else []
    problem = disagreement(view["attempt"], view.get("scheduler"))
    return notes + ([f"warning: {problem}"] if problem else [])


def follow(observe: Callable[[], dict[str, Any]], clock: Clock, echo: Callable[[str], None],
           submitted_at: Optional[float], interval_s: float, as_json: bool = False,
           heartbeat_s: float = HEARTBEAT_S) -> int:
    """Observe until finished; the exit code (0 when the effective outcome is `succeeded`, else 4;
    0 when there was nothing to watch)."""
    last_signature, last_printed = None, None
    while True:
        view = observe()
        now = clock.wall()
        if as_json:
            echo(json.dumps(view, sort_keys=True))
        else:
            signature, line = progress(view, now)
            if signature != last_signature or last_printed is None or now - last_printed >= heartbeat_s:
                elapsed = now - submitted_at if submitted_at else None
                echo(f"[{hms(elapsed)}]  {line}")
                last_signature, last_printed = signature, now
        if finished(view):
            if not as_json:
                for note in stop_notes(view):
                    echo(note)
            return EXIT_OK if view.get("scheduler") is None and not outcome_of(view)[0] else exit_code(view)
        clock.sleep(interval_s)
