"""The `dd-slurm` command. Click commands only: each imports what it needs when it runs."""

from __future__ import annotations

import json
import sys
from typing import Any, Optional, cast

import click

from dd_slurm.cli_options import (
    LazyCommands,
    attempt_path,
    attempt_target,
    load_user_plan,
    settings,
    workspace_for,
    workspace_option,
)
from dd_slurm.cli_options import clock as _clock
from dd_slurm.cli_options import commands as _commands
from dd_slurm.cli_output import SectionedGroup, emit, fail, fail_for, json_option
from dd_slurm.cli_runtime import advance, run
from dd_slurm.errors import EXIT_INVALID


@click.group(cls=SectionedGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dd-slurm")
def cli() -> None:
    """Run Data Designer generation against model servers on a Slurm allocation."""


cli.add_command(run)  # the allocation-local commands (cli_runtime.py)
cli.add_command(advance)


@cli.command()
@click.argument("plans", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option
@click.option("--cluster", "on_cluster", is_flag=True, help="Also what this login node can check: the partition's "
              "nodes hold the job (sinfo), sbatch --test-only takes it, its programs are where the nodes see them.")
@click.option("--workspace", "-w", type=click.Path(file_okay=False), help="With --cluster: check it is shared.")
def validate(plans: tuple[str, ...], as_json: bool, on_cluster: bool, workspace: Optional[str]) -> None:
    """Strictly validate resolved plan files (exit 2 on the first invalid field of each); `-` reads stdin."""
    from dd_slurm.errors import PlanError
    from dd_slurm.plan.checks import plan_warnings
    from dd_slurm.plan.io import load_plan, parse_plan, plan_digest

    results: list[dict[str, Any]] = []
    errors: list[str] = []
    for path in plans:
        try:
            plan = parse_plan(sys.stdin.buffer.read()) if path == "-" else load_plan(path)
            results.append({"plan": path, "valid": True, "digest": plan_digest(plan), "warnings": plan_warnings(plan)})
        except PlanError as err:
            results.append({"plan": path, "valid": False, "error": str(err)})
            errors.append(f"error: {path}: {err}" if len(plans) > 1 else f"error: {err}")
            continue
        if on_cluster:
            found = _on_cluster(plan, workspace)
            results[-1].update(valid=not found["errors"], cluster_errors=found["errors"])
            results[-1]["warnings"] += found["warnings"]
            errors += [f"error: {path}: {line}" if len(plans) > 1 else f"error: {line}" for line in found["errors"]]
    if as_json:
        emit(results, True, str)
    else:
        for result in results:
            if result["valid"]:
                click.echo(f"ok {result['plan']} sha256:{result['digest']}")
            for warning in result.get("warnings", []):
                click.echo(warning if len(plans) == 1 else f"{result['plan']}: {warning}", err=True)
    for line in errors:
        click.echo(line, err=True)
    sys.exit(EXIT_INVALID if errors else 0)


def _on_cluster(plan, workspace: Optional[str]) -> dict[str, list[str]]:
    from dd_slurm.control.cluster_checks import cluster_report
    from dd_slurm.control.settings import with_job_defaults
    from dd_slurm.errors import InvalidInput

    try:
        workspace = workspace_for(workspace)
    except InvalidInput:
        workspace = None
    return cluster_report(with_job_defaults(plan, settings()), _commands(), _clock(), workspace)


@cli.command()
@click.option("--dir", "directory", default="statecharts", show_default=True, type=click.Path(file_okay=False))
@click.option("--check", is_flag=True, help="Exit 1 when the files in --dir are stale.")
def diagram(directory: str, check: bool) -> None:
    """Write the attempt statecharts generated from the machine's table."""
    from dd_slurm.machine.diagram import stale_files, write_all

    if check:
        stale = stale_files(directory)
        if stale:
            fail(f"{directory}: stale statecharts {', '.join(stale)}; run 'dd-slurm diagram'", 1)
        click.echo(f"{directory}: up to date")
        return
    for path in write_all(directory):
        click.echo(str(path))


@cli.command()
@attempt_target
@json_option
@click.option("--chart", is_flag=True, help="Print a Mermaid statechart with the path this attempt took.")
@click.option("--timeline", is_flag=True, help="Where the time went: queue wait, each state, each deployment's "
              "load, and the GPU time spent before the client started.")
@click.option("--mermaid", "as_mermaid", is_flag=True, help="With --timeline: a Mermaid gantt chart.")
def inspect(attempt_dir: Optional[str], last: bool, workspace: Optional[str], as_json: bool, chart: bool, timeline: bool,
            as_mermaid: bool) -> None:
    """State, failure and the log to open, history, readiness, endpoints, result, gateway,
    processes and the cleanup report."""
    from dd_slurm.store.view import attempt_dir as checked_dir
    from dd_slurm.store.view import inspect_attempt

    if chart and (as_json or timeline):
        raise click.UsageError("--chart prints Mermaid; it cannot be combined with --json or --timeline")
    if as_mermaid and (as_json or not timeline):
        raise click.UsageError("--mermaid goes with --timeline, without --json")
    directory = checked_dir(attempt_path(attempt_dir, last, workspace, runs=False))
    if timeline:
        from dd_slurm.store import timeline as TL

        found = TL.load(directory)
        if as_mermaid:
            click.echo(TL.mermaid(found), nl=False)
        else:
            emit(found.to_json(), as_json, lambda _: TL.table(found))
        return
    view = inspect_attempt(directory)
    if chart:
        from dd_slurm.machine.diagram import path_chart

        click.echo(path_chart(view["history"]), nl=False)
        return
    from dd_slurm.control.report_inspect import inspect_text

    emit(view, as_json, inspect_text)


@cli.command()
@attempt_target
@click.argument("name", required=False)
@click.option("-f", "--follow", "follow_", is_flag=True, help="Keep printing what is appended, until the "
              "attempt is done and the log stops growing (Ctrl-C stops).")
@json_option
def logs(attempt_dir: Optional[str], last: bool, workspace: Optional[str], name: str | None, follow_: bool,
         as_json: bool) -> None:
    """Without NAME, the attempt's logs with their sizes; with NAME (batch, supervisor, client,
    preflight, deploy-<name>-<n>, ...), that log. With --last, the one argument is NAME."""
    from dd_slurm.control import logs as log_files
    from dd_slurm.store.view import attempt_dir as checked_dir

    if last and attempt_dir is not None and name is not None:
        raise click.UsageError(f"with --last, give only the log NAME ({name!r} is one argument too many)")
    if last and name is None:
        attempt_dir, name = None, attempt_dir
    directory = checked_dir(attempt_path(attempt_dir, last, workspace, runs=False))
    if name is None and not follow_:
        found = log_files.list_logs(directory)
        emit([log.to_json() for log in found], as_json, lambda _: log_files.listing_text(found, directory))
    elif name is None or as_json:
        raise click.UsageError("-f needs a log NAME" if name is None else "--json lists the logs; not with NAME")
    else:
        log_files.show(directory, name, follow_, _clock(), sys.stdout.buffer)


@cli.command()
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--workspace", "-w", type=click.Path(file_okay=False),
              help="Default: $DD_SLURM_WORKSPACE, the config file's, else the current directory.")
def render(plan: str, workspace: Optional[str]) -> None:
    """Print the batch script that `submit` would submit for PLAN (nothing is written)."""
    import os

    from dd_slurm.bundle.stage import workspace_path
    from dd_slurm.control.preview import preview_script
    from dd_slurm.errors import InvalidInput

    loaded = load_user_plan(plan)
    try:
        ws = workspace_path(workspace_for(workspace))
    except InvalidInput:  # nowhere named: paths as seen from here
        ws = workspace_path(".")
    click.echo(preview_script(loaded, ws, _clock(), os.environ.get("DD_SLURM_BIN_DIR") or None), nl=False)


@cli.command()
@click.argument("plan", type=click.Path(dir_okay=False))
@workspace_option
@json_option
def stage(plan: str, workspace: Optional[str], as_json: bool) -> None:
    """Stage the runtime bundle and a new attempt dir with its entrypoint; print the attempt dir."""
    import os

    from dd_slurm.bundle.stage import stage as do_stage

    loaded, workspace = load_user_plan(plan), workspace_for(workspace)
    if loaded.job.array is not None:
        from dd_slurm.control.shards import stage_run_summary

        emit(stage_run_summary(loaded, workspace, _clock(), os.environ), as_json, lambda v: v["attempt_dir"])
        return
    staged = do_stage(loaded, workspace, _clock(), os.environ.get("DD_SLURM_BIN_DIR") or None)
    out = {"attempt_dir": str(staged.attempt_dir), "bundle_digest": staged.bundle_digest,
           "plan_digest": staged.plan_digest, "job_name": staged.job_name}
    emit(out, as_json, lambda v: v["attempt_dir"])


@cli.command()
@click.argument("plan", metavar="PLAN|ATTEMPT_DIR", type=click.Path())
@workspace_option
@json_option
@click.option("--wait", is_flag=True, help="Follow the attempt to its end like `status --watch`; exit 0 if it "
              "succeeded, 4 otherwise.")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.1), help="With --wait.")
@click.option("--parsable", is_flag=True, help="Print only `ATTEMPT_DIR;JOB_ID` (a run: its dir and array job id).")
def submit(plan: str, workspace: Optional[str], as_json: bool, wait: bool, interval: float, parsable: bool) -> None:
    """Stage and submit PLAN, or submit an attempt staged earlier; returns as soon as Slurm
    accepts the job, unless --wait."""
    import os
    from pathlib import Path

    from dd_slurm.store import attempt_files

    if parsable and as_json:
        raise click.UsageError("--parsable and --json are two output forms; choose one")
    workspace = workspace_for(workspace)
    if Path(plan, attempt_files.RUN_RECORD).is_file():
        from dd_slurm.control.shards import submit_staged_run

        out = submit_staged_run(plan, workspace, _commands(), _clock(), os.environ)
    elif Path(plan).is_dir():
        from dd_slurm.control.submit_staged import submit_staged

        out = submit_staged(plan, workspace, _commands(), _clock(), os.environ)
    else:
        from dd_slurm.control.submit import submit as submit_plan
        from dd_slurm.plan.checks import plan_warnings

        loaded = load_user_plan(plan)
        for warning in plan_warnings(loaded):
            click.echo(warning, err=True)
        out = submit_plan(loaded, workspace, _commands(), _clock(), os.environ)
    if parsable:
        click.echo(f"{out['attempt_dir']};{out['job_id']}")
        if out.get("note"):
            click.echo(f"note: {out['note']}", err=True)
    elif wait and as_json:  # the whole output is JSON Lines
        click.echo(json.dumps(out, sort_keys=True))
    else:
        emit(out, as_json, lambda v: f"{v['attempt_dir']}\nsubmitted batch job {v['job_id']}"
             + (f" (an array of {len(v['shards'])} shards)" if "shards" in v else "")
             + (f"\nnote: {v['note']}" if v.get("note") else ""))
    if wait and "shards" in out:
        _run_status(out["attempt_dir"], as_json, True, interval)
    if wait:
        sys.exit(_follow(Path(out["attempt_dir"]), _clock(), _commands(), interval, as_json))


@cli.command()
@attempt_target
@json_option
@click.option("--watch", is_flag=True, help="Keep observing until the attempt and the job have ended: a line per "
              "change, a heartbeat every 30 s; exit 0 if it succeeded, 4 otherwise. With --json: JSON Lines, "
              "one status object per observation.")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.1))
def status(attempt_dir: Optional[str], last: bool, workspace: Optional[str], as_json: bool, watch: bool,
           interval: float) -> None:
    """The attempt's state from disk plus a fresh scheduler observation (exit 3 when the
    scheduler cannot answer; what is on disk is still shown)."""
    from dd_slurm.control.status import status as do_status
    from dd_slurm.store.attempt_files import is_run_dir
    from dd_slurm.store.view import attempt_dir as checked_dir

    attempt_dir = attempt_path(attempt_dir, last, workspace, runs=True)
    if is_run_dir(attempt_dir):
        return _run_status(attempt_dir, as_json, watch, interval)
    directory, clock, commands = checked_dir(attempt_dir), _clock(), cast(Any, LazyCommands())
    if not watch:
        from dd_slurm.control.report import status_text
        from dd_slurm.errors import EXIT_SCHEDULER

        view = do_status(directory, commands, clock)
        emit(view, as_json, status_text)
        if view.get("scheduler_error"):
            fail(f"scheduler unavailable: {view['scheduler_error']}", EXIT_SCHEDULER)
        return
    sys.exit(_follow(directory, clock, commands, interval, as_json))


def _run_status(run_dir: str, as_json: bool, watch: bool, interval: float) -> None:
    """`status <run dir>`: every shard in one round; `--watch`: exit 0 if all succeeded, else 4."""
    from dd_slurm.control.runs_view import watch_run

    code = watch_run(run_dir, _commands(), _clock(), click.echo, as_json, watch, interval)
    if code is not None:
        sys.exit(code)


def _follow(directory, clock, commands, interval: float, as_json: bool) -> int:
    from dd_slurm.control.status import status as do_status
    from dd_slurm.control.watch import follow
    from dd_slurm.store.attempt_record import read_record

    record = read_record(directory)
    try:
        code = follow(lambda: do_status(directory, commands, clock), clock, click.echo, record.get("submitted_at"),
                      interval, as_json)
    except KeyboardInterrupt:  # the user stops watching, not the job: no error
        click.echo(f"stopped watching; job {record.get('job_id') or '(not submitted)'} stays queued or running "
                   f"(dd-slurm cancel {directory} cancels it)", err=True)
        sys.exit(130)
    if code != 0 and not as_json:
        from dd_slurm.control.logs import failure_ending

        for line in failure_ending(directory):
            click.echo(line)
    return code


@cli.command()
@click.argument("job_ids", nargs=-1, required=True)
@json_option
def query(job_ids: tuple[str, ...], as_json: bool) -> None:
    """Normalized scheduler observations for raw job ids (arrays expanded per task); exit 2 when
    a job id is in neither squeue nor sacct (every observation is printed first)."""
    from dd_slurm.scheduler.query import query as do_query

    found = [o.to_json() for o in do_query(list(job_ids), _commands(), _clock())]
    emit(found, as_json, lambda rows: "\n".join(
        f"{o['job_id']}\t{o['state']}\t{o['exit_code'] if o['exit_code'] is not None else '-'}"
        f"\t{o['reason'] or ''}" for o in rows))
    unknown = [o["job_id"] for o in found if o["state"] == "lost" and o["source"] == "none"]
    if unknown:
        fail(f"no job {unknown[0]} on this cluster: in neither squeue nor sacct"
             + (f" (nor {len(unknown) - 1} more of the ids)" if len(unknown) > 1 else ""), EXIT_INVALID)


@cli.command(name="list")
@workspace_option
@json_option
def list_attempts(workspace: Optional[str], as_json: bool) -> None:
    """Every attempt and shard: state, effective outcome, job id, age (one squeue + one sacct at most)."""
    from dd_slurm.bundle.stage import workspace_path
    from dd_slurm.control.workspace import list_text, list_workspace

    view = list_workspace(workspace_path(workspace_for(workspace)), _commands(), _clock().wall())
    click.echo(json.dumps(view, sort_keys=True) if as_json else list_text(view))  # compact: C encoder


@cli.command()
@workspace_option
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Only what has not changed for AGE: 7d, 12h, 30m, 2w.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@json_option
def clean(workspace: Optional[str], older_than: str, dry_run: bool, as_json: bool) -> None:
    """Remove finished attempts and runs older than AGE, and the bundles no attempt left uses;
    never an attempt whose job may still run (one squeue + one sacct at most)."""
    from dd_slurm.bundle.stage import workspace_path
    from dd_slurm.control.clean import clean as do_clean
    from dd_slurm.control.clean import clean_text, parse_age

    age = parse_age(older_than)
    out = do_clean(workspace_path(workspace_for(workspace)), _commands(), _clock().wall(), age, dry_run)
    emit(out, as_json, clean_text)


@cli.command()
@attempt_target
@json_option
def cancel(attempt_dir: Optional[str], last: bool, workspace: Optional[str], as_json: bool) -> None:
    """scancel the attempt's job and record the request."""
    from dd_slurm.control.status import cancel as do_cancel
    from dd_slurm.store.attempt_files import is_run_dir
    from dd_slurm.store.view import attempt_dir as checked_dir

    attempt_dir = attempt_path(attempt_dir, last, workspace, runs=True)
    if is_run_dir(attempt_dir):  # a run: one scancel of its array
        from dd_slurm.control.runs_view import cancel_run as do_cancel  # type: ignore[assignment]
    out = do_cancel(checked_dir(attempt_dir, runs=True), _commands(), _clock())
    emit(out, as_json, lambda v: f"cancel requested for job {v['job_id']}" if v.get("cancel_requested", True)
         else f"not cancelled: {v['ended']}")


def main(argv: list[str] | None = None, early_signals: list[int] | None = None,
         verified_bundle: tuple[str, str] | None = None) -> None:
    """The console script (the bundle's entry.py passes the list its signal handlers record into,
    and the bundle dir and digest it has just verified): every failure is one `error:` line and an
    exit code, never a traceback."""
    try:
        cli.main(args=argv, standalone_mode=False, obj={"early_signals": early_signals,
                                                        "verified_bundle": verified_bundle})
    except (Exception, KeyboardInterrupt) as err:
        fail_for(err)
