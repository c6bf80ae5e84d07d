"""`inspect` as text: what a person looks for after a run. Pure: the inspect view in, text out."""

from __future__ import annotations

import re
from typing import Any, Optional

from dd_slurm.control.report import attempt_line, cleanup_lines, history_lines, readiness_lines
from dd_slurm.store import attempt_files as files

_SEE_LOG = re.compile(rf"{files.LOGS_DIR}/([A-Za-z0-9._-]+?)\.(?:log|out)\b")
_BY_REASON = (("preflight", "preflight"), ("client", "client"), ("result", "client"))


def failure_entry(history: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The transition that ended the attempt other than `succeeded` (the first with its outcome)."""
    ends = [e for e in history if e.get("kind") == "transition" and e.get("outcome")]
    if not ends or ends[-1].get("outcome") == "succeeded":
        return None
    return next((e for e in ends if e.get("reason") == ends[-1].get("reason")), ends[-1])


def log_to_open(reason: str, detail: str, readiness: Optional[dict[str, Any]]) -> str:
    """The log name (for `dd-slurm logs`) most likely to explain a failure."""
    named = _SEE_LOG.search(detail)
    if named:
        return named.group(1)
    for prefix, log in _BY_REASON:
        if reason.startswith(prefix):
            return log
    for name in sorted(((readiness or {}).get("deployments") or {}), key=len, reverse=True):
        if detail.startswith((f"{name} ", f"{name}:")):
            return files.deploy_step(name)  # the replica's leader
    return "batch"


def failure_and_log(view: dict[str, Any]) -> Optional[tuple[str, str]]:
    """(the failure line, the name of the log to open); None when the attempt has not failed."""
    entry = failure_entry(view.get("history") or [])
    if entry is None:
        return None
    detail = str(entry.get("detail") or "")
    log = log_to_open(str(entry.get("reason") or ""), detail, view.get("readiness"))
    line = f"failure: {entry.get('reason')} in {entry.get('from')}" + (f": {detail}" if detail else "")
    return line + cancelled_by_user(entry, view.get("record") or {}), log


def cancel_requested(record: dict[str, Any]) -> bool:
    return bool(record.get("cancel_requests")) if isinstance(record, dict) else False


def cancelled_by_user(entry: dict[str, Any], record: dict[str, Any]) -> str:
    """` (requested with dd-slurm cancel)` for a SIGTERM that followed a recorded cancel request."""
    return " (requested with dd-slurm cancel)" if entry.get("reason") == "sigterm" and cancel_requested(record) else ""


def failure_lines(view: dict[str, Any]) -> list[str]:
    found = failure_and_log(view)
    if found is None:
        return []
    return [found[0], f"  log to open: dd-slurm logs {view['attempt']['dir']} {found[1]}"]


def failure_report(view: dict[str, Any], last_lines: list[str]) -> list[str]:
    """What a failed `--wait` or `--watch` ends with: the failure, the log to open and, when there
    is one, that log's last lines (`last_lines`, read by the caller)."""
    lines = failure_lines(view)
    if lines and last_lines:
        lines += [f"  its last {len(last_lines)} lines:"] + [f"    {line}" for line in last_lines]
    return lines


def result_lines(manifest: Optional[dict[str, Any]], attempt_dir: str) -> list[str]:
    if not isinstance(manifest, dict):
        return ["result: none recorded"]
    where = f"{attempt_dir}/{files.RESULTS_DIR}/{manifest.get('path')}"
    size = f"{manifest.get('format')}, {manifest.get('records')} records, {manifest.get('bytes')} bytes"
    kept = ["  partial: what the client had written when the attempt was stopped (min_records not required)"] \
        if manifest.get("partial") is True else []
    return [f"result: {where} ({size})", f"  sha256 {manifest.get('sha256')}"] + kept


def image_lines(used: Any) -> list[str]:
    """The container images the attempt ran, each with the digest checked before launch."""
    entries = [(where, u) for where, u in sorted(_dict(used).items()) if isinstance(u, dict)]
    return (["images:"] if entries else []) + [
        f"  {where}: image {u.get('image')} sha256 {u.get('sha256') or '(registry reference: pulled by pyxis)'}"
        for where, u in entries]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def endpoint_state(view: dict[str, Any]) -> str:
    """`withdrawn` once cleanup withdrew them, whatever endpoints.json still says."""
    endpoints, readiness = _dict(view.get("endpoints")), _dict(view.get("readiness"))
    if readiness.get("endpoints") == "withdrawn" or endpoints.get("state") == "withdrawn":
        return "withdrawn"
    return str(endpoints.get("state") or readiness.get("endpoints") or "none")


def endpoint_lines(view: dict[str, Any]) -> list[str]:
    """The aliases and their URLs; `withdrawn` only of endpoints that served (the attempt reached
    `ready`): planned ones that never did are said to be so."""
    models = _dict(_dict(view.get("endpoints")).get("models"))
    state = endpoint_state(view)
    if not models:
        return [f"endpoints: {state if state != 'none' else 'none published'}"]
    served = any(e.get("to") == "ready" for e in view.get("history") or [] if isinstance(e, dict))
    if state == "withdrawn" and not served and view.get("history"):
        lines = ["endpoints: never served (the attempt ended before its servers were ready)"]
    else:
        lines = [f"endpoints: {state} (the aliases below {'were' if state == 'withdrawn' else 'are'} served)"]
    for alias, spec in sorted(models.items()):
        spec = spec if isinstance(spec, dict) else {}
        urls = spec.get("url") or ", ".join(spec.get("base_urls") or []) or "?"
        lines.append(f"  {alias}: {urls}")
    return lines


def gateway_lines(stats: Optional[dict[str, Any]]) -> list[str]:
    """gateway-stats.json (validated when read) as a person reads it: the client connections,
    then per alias its requests, 429s, errors and latency, and per replica its share."""
    if not stats:
        return []
    conn = stats.get("connections")
    lines = ["gateway:" + (f" connections {conn['open']} open, {conn['refused_at_limit']} refused at the limit, "
                           f"{conn['header_timeout']} header and {conn['idle_timeout']} idle timeouts" if conn else "")]
    for alias, figures in sorted(stats["aliases"].items()):
        rejected = figures["rejected_429"]
        lines.append(f"  {alias}: {figures['requests']} requests, answers {_classes(figures['responses'])}, 429s "
                     f"{rejected['queue_full'] + rejected['queue_timeout']} (queue full {rejected['queue_full']}, "
                     f"waited too long {rejected['queue_timeout']}), errors {_classes(figures['errors'])}, "
                     f"{_latency(figures['latency'])}, peak queue {figures['peak_queue']}")
        total = max(figures["requests"], 1)
        lines += [f"    {r['deployment']}-{r['replica']}: {r['requests']} requests ({100 * r['requests'] / total:.0f}%), "
                  f"answers {_classes(r['responses'])}, errors {_classes(r['errors'])}, {_latency(r['latency'])}, "
                  f"peak in flight {r['peak_inflight']}/{r['max_inflight']}" for r in figures["replicas"]]
        lines += underserved(figures)
    return lines


def underserved(figures: dict[str, Any], least: int = 20) -> list[str]:
    """A replica that served under half its even share of an alias's requests (with at least
    `least` of them, so a handful of requests names nobody), with the log to open."""
    replicas, total = figures["replicas"], figures["requests"]
    if len(replicas) < 2 or total < least:
        return []
    share, lines = 100 / len(replicas), []
    for r in replicas:
        if r["requests"] < total / len(replicas) / 2:
            name = f"{r['deployment']}-{r['replica']}"
            lines.append(f"    note: {name} served {100 * r['requests'] / total:.0f}% of the requests, under half its "
                         f"share ({share:.0f}%); see logs/{files.deploy_step(name)}.log")
    return lines


def _classes(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(counts.items())) or "none"


def _latency(summary: dict[str, Any]) -> str:
    if not summary["count"]:
        return "no latency yet"
    return f"p50 {summary['p50_ms']:.1f} ms, p99 {summary['p99_ms']:.1f} ms"


def inspect_text(view: dict[str, Any]) -> str:
    lines = [attempt_line(view["attempt"])]
    lines += failure_lines(view)
    lines += ["history:"] + (history_lines(view["history"]) or ["  (no transitions yet)"])
    lines += readiness_lines(view.get("readiness"))
    lines += endpoint_lines(view)
    lines += result_lines(view.get("result"), view["attempt"]["dir"])
    lines += image_lines(view.get("images"))
    lines += gateway_lines(view.get("gateway"))
    lines += cleanup_lines(view.get("cleanup"))
    return "\n".join(lines)
