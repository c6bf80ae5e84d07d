"""Run-level `status` and `cancel`: a run of shards (runs/<run id>/) answered as one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from dd_slurm.control.workspace import effective, observe_entries, read_entry, reread_ended
from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import sync_filesystem
from dd_slurm.store.attempt_record import update_record


def run_status(run_dir: Path, commands: Any, now: float) -> dict[str, Any]:
    """`status <run dir>`: every shard's status view, all observed in one round."""
    from dd_slurm.store.run_record import read_run
    from dd_slurm.store.run_shards import shard_dirs
    from dd_slurm.store.view import read_readiness

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
                       "scheduler": obs, "readiness": read_readiness(entry.dir / files.READINESS),
                       "effective": effective(entry, obs)})
    run = {k: record.get(k) for k in ("run_id", "job_id", "num_shards", "max_concurrent", "submitted_at")}
    return {"run": {**run, "dir": str(run_dir)}, "shards": shards}


def shard_line(shard: dict[str, Any]) -> str:
    eff, obs = shard["effective"], shard["scheduler"]
    line = f"  {shard['attempt']['id']}: {shard['attempt']['state']}"
    if obs:
        line += f" | job {obs['job_id']} {obs['state']}" + (f" ({obs['reason']})" if obs.get("reason") else "")
    if eff:
        line += f" => {eff['outcome']} ({eff['reason']})"
    return line


SUMMARY_ORDER = ("failed", "timed_out", "cancelled", "running", "pending", "staged")


def shard_summary(view: dict[str, Any]) -> str:
    """One line for the whole run: `done 2/4, failed 1, running 1` (done: succeeded; a shard
    without an outcome counts by its job's state, or `staged` before it has one)."""
    counts: dict[str, int] = {}
    for shard in view["shards"]:
        outcome = (shard["effective"] or {}).get("outcome")
        kind = "done" if outcome == "succeeded" else outcome or (shard["scheduler"] or {}).get("state") or "staged"
        counts[kind] = counts.get(kind, 0) + 1
    order = SUMMARY_ORDER + tuple(sorted(set(counts) - set(SUMMARY_ORDER) - {"done"}))
    return ", ".join([f"done {counts.get('done', 0)}/{len(view['shards'])}"]
                     + [f"{kind} {counts[kind]}" for kind in order if counts.get(kind)])


def run_line(view: dict[str, Any]) -> str:
    run = view["run"]
    return f"run {run['run_id']}: {run['num_shards']} shards, array job {run['job_id'] or '(not submitted)'}"


def run_status_text(view: dict[str, Any]) -> str:
    return "\n".join([run_line(view)] + [shard_line(shard) for shard in view["shards"]] + [shard_summary(view)])


def changed_lines(view: dict[str, Any], shown: dict[str, str], elapsed: Optional[float]) -> list[str]:
    """For `--watch`: the run's line the first time, the lines of the shards whose line changed
    since `shown` (which is updated), then the summary line with the time since submission;
    nothing when no shard changed."""
    from dd_slurm.control.watch import hms

    header = [] if shown else [run_line(view)]
    changed = []
    for shard in view["shards"]:
        line = shard_line(shard)
        if shown.get(shard["attempt"]["id"]) != line:
            shown[shard["attempt"]["id"]] = line
            changed.append(line)
    return header + changed + [f"[{hms(elapsed)}]  {shard_summary(view)}"] if changed else []


def run_finished(view: dict[str, Any]) -> bool:
    """Nothing left to watch: never submitted, or every shard's job is terminal."""
    return all(s["scheduler"] is None or s["scheduler"].get("terminal") for s in view["shards"])


def cancel_run(run_dir: Path, commands: Any, clock: Any) -> dict[str, Any]:
    """One `scancel <array job id>`: running shards are cancelled, pending ones never start. The
    request is recorded on the run and on every shard first."""
    from dd_slurm.store.run_record import read_run, update_run
    from dd_slurm.store.run_shards import shard_dirs

    run = read_run(run_dir)
    now, job_id = clock.wall(), run.get("job_id")
    if not job_id:
        raise AttemptDirError(f"{run_dir}: never submitted, nothing to cancel")
    commands = run_commands(run, commands)
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


def run_commands(run: dict[str, Any], commands: Any) -> Any:
    """The client for the cluster the run went to, once the array job's rows are shown to be this
    run's (by name): a job id that is another job's is an error, never a cancel."""
    from dd_slurm.scheduler.query import check_job_name

    commands = commands.for_cluster(run.get("cluster"))
    check_job_name(commands.query([run["job_id"]], run.get("submitted_at")), run["job_name"], run.get("cluster"))
    return commands


def watch_run(run_dir: str, commands: Any, clock: Any, echo: Callable[[str], None], as_json: bool, watch: bool,
              interval: float) -> Optional[int]:
    """Print the run's status; with `watch`, observe again until every shard's job ended, printing
    (as text) only the shards that changed and a summary line, or (as JSON) every changed view;
    then the exit code: 0 if every shard succeeded, 4 otherwise."""
    last: Optional[str] = None
    shown: dict[str, str] = {}
    while True:
        view = run_status(Path(run_dir), commands, clock.wall())
        if not watch:
            echo(json.dumps(view, sort_keys=True, indent=1) if as_json else run_status_text(view))
            return None
        if as_json:
            text = json.dumps(view, sort_keys=True)
            if text != last:
                echo(text)
                last = text
        else:
            submitted = view["run"].get("submitted_at")
            for line in changed_lines(view, shown, clock.wall() - submitted if submitted else None):
                echo(line)
        if run_finished(view):
            return 0 if all((v["effective"] or {}).get("outcome") == "succeeded" for v in view["shards"]) else 4
        clock.sleep(interval)
