"""The allocation-local commands, `run` and `advance` (cli.py adds them to the group): the
supervisor's way in (the bundle's entry.py calls `run`). Lazy imports, like the rest of the CLI."""

from __future__ import annotations

import sys

import click

from dd_slurm.cli_output import emit, json_option
from dd_slurm.machine.table import UNTIL_STATES

digest_options = [
    click.option("--bundle-digest", help="Expected bundle digest (the entrypoint passes it)."),
    click.option("--plan-digest", help="Expected plan digest (the entrypoint passes it)."),
]


def _with_digests(func):
    for option in reversed(digest_options):
        func = option(func)
    return func


@click.command()
@click.argument("attempt_dir", type=click.Path())
@_with_digests
@json_option
def run(attempt_dir: str, bundle_digest: str | None, plan_digest: str | None, as_json: bool) -> None:
    """Inside the allocation: drive the attempt to `done` (exit 4 unless it succeeded)."""
    from dd_slurm.runtime.run import run_command

    code, summary = run_command(attempt_dir, bundle_digest, plan_digest, early_signals=_early_signals(),
                                verified_bundle=_context("verified_bundle"))
    from dd_slurm.control.report import attempt_line

    emit(summary, as_json, attempt_line)
    sys.exit(code)


@click.command()
@click.argument("attempt_dir", type=click.Path())
@click.option("--until", "until", type=click.Choice(
    list(UNTIL_STATES)),
    help="Stop on reaching this state (default: run to done); only verified, cleanup or done, where no "
         "process of the attempt is left running without a supervisor.")
@_with_digests
def advance(attempt_dir: str, until: str | None, bundle_digest: str | None, plan_digest: str | None) -> None:
    """Run the next transition(s) only, in this process."""
    from dd_slurm.runtime.run import run_in_dir

    _directory, attempt = run_in_dir(attempt_dir, bundle_digest, plan_digest, until=until,
                                     early_signals=_early_signals(), command="advance",
                                     verified_bundle=_context("verified_bundle"))
    click.echo(attempt.state)


def _early_signals() -> list[int] | None:
    """Signals the bundle's entry point recorded before the CLI was imported (see main)."""
    ctx = click.get_current_context()
    return (ctx.obj or {}).get("early_signals")


def _context(key: str):
    """What the bundle's entry point handed the CLI (see cli.main), or None."""
    return (click.get_current_context().obj or {}).get(key)
