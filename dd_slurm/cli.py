"""The `dd-slurm` command. Click commands only: each imports what it needs when it runs."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, NoReturn

import click

from dd_slurm.errors import EXIT_INVALID, DdSlurmError

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def emit(value: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    click.echo(json.dumps(value, indent=1, sort_keys=True) if as_json else text(value))


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
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


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_INVALID if err.exit_code == 2 else err.exit_code)
    except click.exceptions.Abort:
        fail("aborted", 130)
    except DdSlurmError as err:
        fail(str(err), err.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
