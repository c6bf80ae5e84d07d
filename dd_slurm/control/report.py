"""Human-readable text for `inspect` and `status`. Pure: dicts in, text out."""

from __future__ import annotations

from typing import Any


def printable(text: str) -> str:
    """Text any terminal can take: a lone surrogate (from a path or a damaged file) is escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def attempt_line(attempt: dict[str, Any]) -> str:
    line = f"attempt {attempt['id']}: {attempt['state']}"
    if attempt.get("outcome"):
        line += f" ({attempt['outcome']}, {attempt['reason']})"
    return line


def history_lines(history: list[dict[str, Any]]) -> list[str]:
    lines = []
    for entry in history:
        kind = entry["kind"]
        arrow = f"{entry['from']} -> {entry['to']}" if kind == "transition" else \
            f"{entry['from']} ({'replica' if kind == 'event' else 'ignored'})"
        why = entry.get("reason") or entry.get("ignored_reason")
        what = f"{entry['trigger']} {entry.get('replica', '')}".rstrip() if kind == "event" else entry["trigger"]
        lines.append(f"  {entry['time']}  {arrow:24} {what}" + (f"  [{why}]" if why else ""))
    return lines


def readiness_lines(readiness: dict[str, Any] | None) -> list[str]:
    if not readiness:
        return ["readiness: none recorded"]
    lines = ["readiness:"]
    for name, dep in sorted(readiness.get("deployments", {}).items()):
        lines.append(f"  {name}: {dep.get('state')} ({len(dep.get('ready', []))}/{dep.get('expected')} ready)")
    return lines


def cleanup_lines(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return ["cleanup: not run"]
    took = report.get("seconds")
    lines = [f"cleanup: {report.get('verdict', '?')} (runs: {report.get('runs', 1)}"
             + (f", {took:.1f}s)" if isinstance(took, (int, float)) else ")")]
    lines += [f"  note: {note}" for note in report.get("notes", [])]
    killed, after = report.get("leftovers_killed", []), report.get("leftovers_after", [])
    if killed or after:
        lines.append(f"  leftovers: {len(killed)} killed, {len(after)} still there after the scan")
    for proc in report.get("processes", []):
        lines.append(f"  {proc.get('name')}: {proc.get('how')}")
    for problem in report.get("problems", []):
        lines.append(f"  problem: {problem}")
    return lines


def scheduler_line(obs: dict[str, Any] | None) -> str:
    if not obs:
        return "scheduler: not submitted"
    line = f"scheduler: job {obs['job_id']} {obs['state']}"
    if obs.get("exit_code") is not None:
        line += f" exit {obs['exit_code']}:{obs.get('signal') or 0}"
    return line + (f" ({obs['reason']})" if obs.get("reason") else "")


def disagreement(attempt: dict[str, Any], obs: dict[str, Any] | None) -> str | None:
    """Why the scheduler's view and the attempt's outcome disagree, or None when they agree.
    The supervisor exits 0 only on success, so a succeeded attempt is a completed job and any
    other outcome is a job that did not complete."""
    if not obs or not obs.get("terminal"):
        return None
    if attempt["state"] != "done":
        if attempt["state"] == "staged":
            return f"the job is {obs['state']} and its supervisor never ran (ended before it started?)"
        return f"the job is {obs['state']} but the attempt stopped in {attempt['state']} (supervisor killed?)"
    if (attempt["outcome"] == "succeeded") != (obs["state"] == "completed"):
        return f"the attempt {attempt['outcome']} but the job is {obs['state']}"
    return None


def effective_line(effective: dict[str, Any] | None) -> str:
    if not effective:
        return "effective: not decided (the job lives, the attempt runs)"
    if effective["from"] == "scheduler" and effective["reason"] == "never_started":
        return f"effective: {effective['outcome']} ({effective['reason']}: the job ended before the attempt started)"
    if effective["from"] == "scheduler":
        return (f"effective: {effective['outcome']} ({effective['reason']}: the job ended but its supervisor never "
                f"finished the attempt)")
    return f"effective: {effective['outcome']} ({effective['reason']})"


def status_text(view: dict[str, Any]) -> str:
    lines = [attempt_line(view["attempt"])]
    if view.get("scheduler_error"):
        lines.append(f"scheduler: unavailable ({view['scheduler_error']})")
    else:
        lines.append(scheduler_line(view.get("scheduler")))
    lines.append(effective_line(view.get("effective")))
    if view.get("progress"):
        from dd_slurm.control.progress import progress_line

        lines.append(f"progress: {progress_line(view['progress']) or 'nothing counted yet'}")
    result = view.get("result")
    if result:
        lines.append(f"result: {result['path']}, {result['records']} records"
                     + (" (partial: kept when the attempt was stopped)" if result["partial"] else ""))
    problem = disagreement(view["attempt"], view.get("scheduler"))
    if problem:
        lines.append(f"warning: {problem}")
    if view.get("readiness"):
        stale = (view.get("effective") or {}).get("from") == "scheduler"
        lines += [line + (" [stale: its supervisor is gone]" if stale and line.startswith("  ") else "")
                  for line in readiness_lines(view["readiness"])]
    return "\n".join(lines)

