"""The `dd-slurm` command. Click commands only: each imports what it needs when it runs."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, NoReturn

import click

from dd_slurm.errors import EXIT_INVALID, DdSlurmError

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def emit(value: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    click.echo(json.dumps(value, indent=1, sort_keys=True) if as_json else printable(text(value)))


def printable(text: str) -> str:
    """Text any terminal can take: a lone surrogate (from a path or a damaged file) is escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def fail(message: str, code: int) -> NoReturn:
    one_line = " / ".join(part for part in str(message).splitlines() if part.strip()) or "failed"
    click.echo(f"error: {printable(one_line)}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dd-slurm")
def cli() -> None:
    """Run Data Designer generation against model servers on a Slurm allocation."""


@cli.command()
@click.argument("plans", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option
def validate(plans: tuple[str, ...], as_json: bool) -> None:
    """Strictly validate resolved plan files (exit 2 on the first invalid field of each)."""
    from dd_slurm.errors import PlanError
    from dd_slurm.plan import load_plan, plan_digest

    results, errors = [], []
    for path in plans:
        try:
            results.append({"plan": path, "valid": True, "digest": plan_digest(load_plan(path))})
        except PlanError as err:
            results.append({"plan": path, "valid": False, "error": str(err)})
            errors.append(f"error: {path}: {err}" if len(plans) > 1 else f"error: {err}")
    if as_json:
        emit(results, True, str)
    else:
        for result in results:
            if result["valid"]:
                click.echo(f"ok {result['plan']} sha256:{result['digest']}")
    for line in errors:
        click.echo(line, err=True)
    sys.exit(EXIT_INVALID if errors else 0)


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
@click.argument("attempt_dir", type=click.Path())
@json_option
@click.option("--chart", is_flag=True, help="Print a Mermaid statechart with the path this attempt took.")
def inspect(attempt_dir: str, as_json: bool, chart: bool) -> None:
    """State, transition history, readiness, endpoints, processes and the cleanup report."""
    from dd_slurm.store.view import attempt_dir as checked_dir, inspect_attempt

    directory = checked_dir(attempt_dir)
    view = inspect_attempt(directory)
    if chart:
        from dd_slurm.machine.diagram import path_chart

        click.echo(path_chart(view["history"]), nl=False)
        return
    from dd_slurm.report import inspect_text

    emit(view, as_json, inspect_text)


def _commands(timeout_s: float = 30.0):
    import os

    from dd_slurm.clock import Clock
    from dd_slurm.scheduler.commands import SlurmCommands

    return SlurmCommands.from_environ(Clock(), os.environ, timeout_s=timeout_s)


class _LazyCommands:
    """The command client, built (and its modules imported) only if a Slurm tool is needed: the
    status of a finished attempt needs none, and runs from a fresh process."""

    def __init__(self) -> None:
        self._real = None

    def __getattr__(self, name: str):
        if self._real is None:
            self._real = _commands()
        return getattr(self._real, name)


def _clock():
    from dd_slurm.clock import Clock

    return Clock()


workspace_option = click.option("--workspace", "-w", required=True, type=click.Path(file_okay=False),
                                help="Where bundles/ and attempts/ live (shared with the compute nodes).")


@cli.command()
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option("--workspace", "-w", default=".", show_default=True, type=click.Path(file_okay=False))
def render(plan: str, workspace: str) -> None:
    """Print the batch script that `submit` would submit for PLAN (nothing is written)."""
    import os

    from dd_slurm.bundle.manifest import planned_manifest
    from dd_slurm.bundle.stage import new_attempt_id, workspace_path
    from dd_slurm.plan import load_plan, plan_digest
    from dd_slurm.scheduler.render import ScriptContext, render_script

    loaded = load_plan(plan)
    ws = workspace_path(workspace)
    digest = planned_manifest()[0]["digest"]
    attempt_id = new_attempt_id(loaded, _clock())
    ctx = ScriptContext(attempt_id, str(ws / "attempts" / attempt_id), str(ws / "bundles" / digest), digest,
                        plan_digest(loaded), os.environ.get("DD_SLURM_BIN_DIR") or None)
    click.echo(render_script(loaded, ctx), nl=False)


@cli.command()
@click.argument("plan", type=click.Path(dir_okay=False))
@workspace_option
@json_option
def stage(plan: str, workspace: str, as_json: bool) -> None:
    """Stage the runtime bundle and a new attempt dir with its entrypoint; print the attempt dir."""
    import os

    from dd_slurm.bundle.stage import stage as do_stage
    from dd_slurm.plan import load_plan

    staged = do_stage(load_plan(plan), workspace, _clock(), os.environ.get("DD_SLURM_BIN_DIR") or None)
    out = {"attempt_dir": str(staged.attempt_dir), "bundle_digest": staged.bundle_digest,
           "plan_digest": staged.plan_digest, "job_name": staged.job_name}
    emit(out, as_json, lambda v: v["attempt_dir"])


@cli.command()
@click.argument("plan", type=click.Path(dir_okay=False))
@workspace_option
@json_option
def submit(plan: str, workspace: str, as_json: bool) -> None:
    """Stage and submit PLAN; returns as soon as Slurm accepts the job."""
    import os

    from dd_slurm.control import submit as do_submit

    out = do_submit(plan, workspace, _commands(), _clock(), os.environ)
    emit(out, as_json, lambda v: f"{v['attempt_dir']}\nsubmitted batch job {v['job_id']}"
         + (f"\nnote: {v['note']}" if v.get("note") else ""))


@cli.command()
@click.argument("attempt_dir", type=click.Path())
@json_option
@click.option("--watch", is_flag=True, help="Keep observing until the attempt and the job have ended.")
@click.option("--interval", default=2.0, show_default=True, type=click.FloatRange(min=0.1))
def status(attempt_dir: str, as_json: bool, watch: bool, interval: float) -> None:
    """The attempt's state from disk plus a fresh scheduler observation (exit 3 when the
    scheduler cannot answer; what is on disk is still shown)."""
    from dd_slurm.control import status as do_status
    from dd_slurm.errors import EXIT_SCHEDULER
    from dd_slurm.report import progress_line, status_text
    from dd_slurm.store.attempt_record import read_record
    from dd_slurm.store.view import attempt_dir as checked_dir

    directory, clock, commands = checked_dir(attempt_dir), _clock(), _LazyCommands()
    submitted = read_record(directory).get("submitted_at")
    last = None
    while True:
        view = do_status(directory, commands, clock)
        if as_json:
            click.echo(json.dumps(view, sort_keys=True, indent=None if watch else 1))
        elif not watch:
            click.echo(printable(status_text(view)))
        else:
            line = progress_line(view, clock.wall() - submitted if submitted else None)
            if line[11:] != last:
                click.echo(printable(line))
                last = line[11:]
        if not watch or _finished(view):
            if watch and not as_json:
                _explain_stop(view)
            if view.get("scheduler_error") and not watch:
                fail(f"scheduler unavailable: {view['scheduler_error']}", EXIT_SCHEDULER)
            return
        clock.sleep(interval)


def _finished(view: dict) -> bool:
    """Stop watching once the effective outcome is known and the job has ended (the attempt is
    then done, or never will be: its supervisor is gone), or when there is no job to watch."""
    scheduler = view.get("scheduler")
    if scheduler is None:
        return not view.get("scheduler_error")
    return view.get("effective") is not None and bool(scheduler.get("terminal"))


def _explain_stop(view: dict) -> None:
    from dd_slurm.report import disagreement, effective_line

    if view.get("scheduler") is None:
        click.echo("not submitted: nothing to watch")
    problem = disagreement(view["attempt"], view.get("scheduler"))
    if problem:
        click.echo(f"warning: {problem}")
    if (view.get("effective") or {}).get("from") == "scheduler":
        click.echo(effective_line(view["effective"]))


@cli.command()
@click.argument("job_ids", nargs=-1, required=True)
@json_option
def query(job_ids: tuple[str, ...], as_json: bool) -> None:
    """Normalized scheduler observations for raw job ids (arrays expanded per task)."""
    from dd_slurm.control import query as do_query

    found = [o.to_json() for o in do_query(list(job_ids), _commands(), _clock())]
    emit(found, as_json, lambda rows: "\n".join(
        f"{o['job_id']}\t{o['state']}\t{o['exit_code'] if o['exit_code'] is not None else '-'}"
        f"\t{o['reason'] or ''}" for o in rows))


@cli.command()
@click.argument("attempt_dir", type=click.Path())
@json_option
def cancel(attempt_dir: str, as_json: bool) -> None:
    """scancel the attempt's job and record the request."""
    from dd_slurm.control import cancel as do_cancel
    from dd_slurm.store.view import attempt_dir as checked_dir

    out = do_cancel(checked_dir(attempt_dir), _commands(), _clock())
    emit(out, as_json, lambda v: f"cancel requested for job {v['job_id']}" if v["cancel_requested"]
         else f"not cancelled: {v['ended']}")


def _digests(attempt_dir: str, bundle_digest: str | None, plan_digest: str | None) -> tuple[str, str]:
    from dd_slurm.store.attempt_record import read_record

    if bundle_digest and plan_digest:
        return bundle_digest, plan_digest
    record = read_record(attempt_dir)
    return bundle_digest or record["bundle_digest"], plan_digest or record["plan_digest"]


digest_options = [
    click.option("--bundle-digest", help="Expected bundle digest (the entrypoint passes it)."),
    click.option("--plan-digest", help="Expected plan digest (the entrypoint passes it)."),
]


def _with_digests(func):
    for option in reversed(digest_options):
        func = option(func)
    return func


@cli.command()
@click.argument("attempt_dir", type=click.Path())
@_with_digests
@json_option
def run(attempt_dir: str, bundle_digest: str | None, plan_digest: str | None, as_json: bool) -> None:
    """Inside the allocation: drive the attempt to `done` (exit 4 unless it succeeded)."""
    from dd_slurm.errors import EXIT_ATTEMPT_FAILED
    from dd_slurm.runtime.run import run_attempt
    from dd_slurm.store.view import attempt_dir as checked_dir, attempt_summary

    directory = checked_dir(attempt_dir)
    attempt = run_attempt(directory, *_digests(attempt_dir, bundle_digest, plan_digest))
    from dd_slurm.report import attempt_line

    emit(attempt_summary(directory), as_json, attempt_line)
    sys.exit(0 if attempt.outcome == "succeeded" else EXIT_ATTEMPT_FAILED)


@cli.command()
@click.argument("attempt_dir", type=click.Path())
@click.option("--until", "until", type=click.Choice(
    ["verified", "preflight", "deploying", "ready", "client", "finalize", "cleanup", "done"]),
    help="Stop on reaching this state (default: run to done).")
@_with_digests
def advance(attempt_dir: str, until: str | None, bundle_digest: str | None, plan_digest: str | None) -> None:
    """Run the next transition(s) only, in this process."""
    from dd_slurm.runtime.run import run_attempt
    from dd_slurm.store.view import attempt_dir as checked_dir

    directory = checked_dir(attempt_dir)
    attempt = run_attempt(directory, *_digests(attempt_dir, bundle_digest, plan_digest), until=until)
    click.echo(attempt.state)


def main(argv: list[str] | None = None) -> None:
    """The console script: every failure is one `error:` line and an exit code, never a traceback."""
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:
        fail(err.format_message(), EXIT_INVALID if err.exit_code == 2 else err.exit_code)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except DdSlurmError as err:
        fail(str(err), err.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except OSError as err:  # an unwritable or file-shaped workspace, a vanished attempt dir...
        where = f"{err.filename}: " if err.filename else ""
        fail(f"{where}{err.strerror or err}", EXIT_INVALID)
    except RecursionError:
        fail("input nested too deeply", EXIT_INVALID)
    except ValueError as err:
        if "null byte" not in str(err):  # click stats paths; no shell can pass a NUL, an in-process caller can
            fail(f"internal error (ValueError: {err}); please report it", 1)
        fail("a path cannot hold a NUL byte", EXIT_INVALID)
    except Exception as err:  # noqa: BLE001 - a bug: still one line, and said to be ours
        fail(f"internal error ({type(err).__name__}: {err}); please report it", 1)
