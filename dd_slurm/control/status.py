"""`dd-slurm status` and `cancel` of an attempt: the record from disk, the scheduler's observation, the
effective outcome. Collaborators passed in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from dd_slurm.clock import Clock
from dd_slurm.errors import AttemptDirError, SchedulerError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.attempt_record import add_observation, read_record, settled, update_record
from dd_slurm.store.view import attempt_summary, checked_journal, read_readiness

if TYPE_CHECKING:  # imported when needed: a finished attempt's status calls no tool, parses nothing
    from dd_slurm.scheduler.commands import SlurmCommands

# The scheduler's terminal states, as the attempt's outcome when its supervisor is gone
SCHEDULER_OUTCOME = {"cancelled": "cancelled", "timeout": "timed_out", "deadline": "timed_out",
                     "preempted": "cancelled"}


def status(attempt_dir: Path, commands: SlurmCommands, clock: Clock,
           record: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The attempt from disk, a scheduler observation (none needed once accounting's terminal
    record is persisted), readiness, and the effective outcome. A scheduler that cannot answer
    leaves `scheduler` null and says why in `scheduler_error` (the CLI then exits 3). `record`:
    attempt.json as the caller has just read it."""
    return _status_view(attempt_dir, lambda found: observe_attempt(attempt_dir, found, commands, clock), clock.wall,
                        record)


def settled_status(attempt_dir: Path, record: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
    """`status` of an attempt whose job accounting has already recorded as ended: the same view,
    from disk alone (no scheduler, no clock). None while the answer still needs the scheduler."""
    record = read_record(attempt_dir) if record is None else record
    if settled(record) is None:
        return None
    return _status_view(attempt_dir, settled, None, record)


def _status_view(attempt_dir: Path, observe: Callable[[dict], Optional[dict]],
                 now: Optional[Callable[[], float]] = None, record: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    entries = checked_journal(attempt_dir / files.JOURNAL)  # read once: the summary, staging and progress use it
    summary = attempt_summary(attempt_dir, entries)
    record = read_record(attempt_dir) if record is None else record
    readiness = read_readiness(attempt_dir / files.READINESS)
    view: dict[str, Any] = {"attempt": summary, "scheduler": None, "readiness": readiness}
    try:
        view["scheduler"] = observe(record) if record.get("job_id") else None
    except SchedulerError as err:
        view["scheduler_error"] = str(err)
    if view["scheduler"] and view["scheduler"]["terminal"] and summary["state"] != "done":
        entries = checked_journal(attempt_dir / files.JOURNAL)  # the job may have ended between reading and asking
        view["attempt"] = summary = attempt_summary(attempt_dir, entries)
    view["effective"] = effective(summary, view["scheduler"])
    if summary["state"] == "done":
        view["result"] = result_summary(attempt_dir)
    elif summary["state"] == "preflight" and view["effective"] is None:
        view["staging"] = staging_view(attempt_dir, entries)
    elif summary["state"] == "client" and now is not None and view["effective"] is None:  # the client runs
        from dd_slurm.control.progress import progress

        view["progress"] = progress(attempt_dir, now(), entries, record)
    return view


def staging_view(attempt_dir: Path, entries: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The nodes copying weights while the preflight runs (the staging step's request), and those
    that have reported (in the journal's `entries`); null when nothing is staged."""
    from dd_slurm.store.view import read_json

    try:
        request = read_json(files.stage_request(attempt_dir))
    except AttemptDirError:
        return None
    nodes = request.get("nodes") if isinstance(request, dict) else None
    if not isinstance(nodes, dict) or not all(isinstance(n, str) for n in nodes):
        return None
    done = {e.get("node") for e in entries if e.get("trigger") == "weights_staged"}
    return {"nodes": sorted(nodes), "staged": sorted(n for n in nodes if n in done)}


def result_summary(attempt_dir: Path) -> Optional[dict[str, Any]]:
    """`{"path", "records", "partial"}` of the result manifest, once the attempt is done (null when
    it kept none); `partial`: records a stopped client had written, kept without `min_records`."""
    from dd_slurm.store.view import read_json

    manifest = read_json(attempt_dir / files.RESULT_MANIFEST)
    if manifest is None:
        return None
    records = manifest.get("records")
    return {"path": manifest.get("path") if isinstance(manifest.get("path"), str) else None,
            "records": records if type(records) is int else None, "partial": manifest.get("partial") is True}


def observe_attempt(attempt_dir: Path, record: dict, commands: SlurmCommands, clock: Clock) -> Optional[dict]:
    job_id = record.get("job_id")
    if not job_id:
        return None
    final = settled(record)
    if final is not None:
        return final
    now = clock.wall()
    current = ask_scheduler(record, commands, now)
    with update_record(attempt_dir) as fresh:
        add_observation(fresh, now, current)
    return current


def ask_scheduler(record: dict, commands: SlurmCommands, now: float) -> dict:
    """A fresh observation of the attempt's job, from the cluster it was submitted to, once every
    row is shown to be that job (by the name dd-slurm gave it)."""
    from dd_slurm.scheduler.observe import LagClock
    from dd_slurm.scheduler.query import check_job_name, observations

    job_id = record["job_id"]
    seen = record.get("last_seen") or record.get("submitted_at") or now
    lag = LagClock(now, float(record.get("reconcile_deadline_s") or 300.0), {job_id: seen})
    result = commands.for_cluster(record.get("cluster")).query([job_id], record.get("submitted_at"))
    check_job_name(result, record.get("job_name"), record.get("cluster"))
    return observations(result, [job_id], lag)[0].to_json()


def effective(attempt: dict[str, Any], obs: Optional[dict[str, Any]]) -> Optional[dict[str, str]]:
    """The attempt's own outcome once it is done; null while the job lives; once the scheduler
    says the job ended (or is lost) without the attempt reaching done: failed / cancelled /
    timed_out from the scheduler's state (scheduler_outcome), reason `never_started` when no
    supervisor ever ran (cancelled while pending), else `supervisor_lost` (the supervisor is gone)."""
    if attempt.get("state") == "done" and attempt.get("outcome"):
        return {"outcome": attempt["outcome"], "reason": attempt.get("reason") or "", "from": "attempt"}
    if not obs or not obs.get("terminal"):
        return None
    reason = "never_started" if never_started(Path(attempt["dir"]), attempt.get("state")) else "supervisor_lost"
    return {"outcome": scheduler_outcome(obs), "reason": reason, "from": "scheduler"}


def scheduler_outcome(obs: dict[str, Any]) -> str:
    """The outcome a job's end means: its state's, and `cancelled` for a batch script that a stop
    signal (SIGTERM, SIGINT) ended before its supervisor could record it (the script's first
    instant, before the stop signals are blocked)."""
    if obs["state"] == "failed" and obs.get("signal") in (2, 15):
        return "cancelled"
    return SCHEDULER_OUTCOME.get(obs["state"], "failed")


def never_started(attempt_dir: Path, state: Optional[str]) -> bool:
    """No supervisor ever ran for the attempt: it is `staged`, with no journal and no supervisor record."""
    return state == "staged" and not (attempt_dir / files.JOURNAL).exists() and \
        not (attempt_dir / files.SUPERVISOR).exists()


def cancel(attempt_dir: Path, commands: SlurmCommands, clock: Clock) -> dict[str, Any]:
    """scancel, then record the request. An attempt that has ended (done, or its job terminal)
    is not cancelled and nothing is recorded; a failing scancel records nothing either."""
    record = read_record(attempt_dir)
    job_id = record.get("job_id")
    if not job_id:
        raise AttemptDirError(f"{attempt_dir}: never submitted, nothing to cancel")
    out = {"attempt_dir": str(attempt_dir), "job_id": job_id, "cancel_requested": False}
    ended = _ended(attempt_dir, record, commands, clock)
    if ended:
        return {**out, "ended": ended}
    commands.for_cluster(record.get("cluster")).cancel(job_id)
    with update_record(attempt_dir) as fresh:
        fresh["cancel_requests"].append({"time": clock.wall()})
    return {**out, "cancel_requested": True}


def _ended(attempt_dir: Path, record: dict, commands: SlurmCommands, clock: Clock) -> Optional[str]:
    attempt = attempt_summary(attempt_dir)
    if attempt["state"] == "done":
        return f"the attempt is done ({attempt['outcome']}, {attempt['reason']})"
    final = settled(record)
    if final is None:
        final = ask_scheduler(record, commands, clock.wall())
    if final["terminal"]:
        return f"job {final['job_id']} has ended ({final['state']})"
    return None
