"""The `dd-slurm` console script. `status [--json] DIR` of an attempt is answered without importing
click: from disk alone once accounting has recorded the job's end (half a fresh process's time),
else with the one scheduler query it needs. That is what a script or a watch polling many
attempts runs most. Anything else, including every error but a scheduler that cannot answer, and
every other shape of arguments, is the click CLI's (dd_slurm.cli), which prints the same view.
So is the supervisor's `run DIR --bundle-digest D --plan-digest P`, the words the rendered batch
script passes (the bundle's entry.py calls this main): click would be a fifth of its start-up
before any server can start. Its errors are the click CLI's lines and exit codes (cli_output.fail_for)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn


def main(argv: list[str] | None = None, early_signals: list[int] | None = None,
         verified_bundle: tuple[str, str] | None = None) -> None:
    """`early_signals` and `verified_bundle`: what the bundle's entry point hands the supervisor
    (see cli.main)."""
    args = sys.argv[1:] if argv is None else list(argv)
    words = run_words(args)
    if words is not None:
        supervise(words, early_signals, verified_bundle)
    if not answered_from_disk(args):
        from dd_slurm.cli import main as cli_main

        cli_main(args, early_signals=early_signals, verified_bundle=verified_bundle)


def run_words(args: list[str]) -> tuple[str, str, str] | None:
    """(DIR, bundle digest, plan digest) of exactly `run DIR --bundle-digest D --plan-digest P`
    with none of the three empty or an option; None for anything else."""
    if len(args) != 6 or (args[0], args[2], args[4]) != ("run", "--bundle-digest", "--plan-digest"):
        return None
    values = (args[1], args[3], args[5])
    return None if any(not v or v.startswith("-") for v in values) else values


def supervise(words: tuple[str, str, str], early_signals: list[int] | None,
              verified_bundle: tuple[str, str] | None) -> NoReturn:
    """`dd-slurm run`, as the click command runs it: the attempt's line, then its exit code."""
    try:
        from dd_slurm.control.report import attempt_line, printable
        from dd_slurm.runtime.run import run_command

        code, summary = run_command(*words, early_signals=early_signals, verified_bundle=verified_bundle)
        sys.stdout.write(printable(attempt_line(summary)) + "\n")
        sys.stdout.flush()
    except (Exception, KeyboardInterrupt) as err:
        from dd_slurm.cli_output import fail_for

        fail_for(err)
    sys.exit(code)


def answered_from_disk(args: list[str]) -> bool:
    """Printed `status [--json] DIR` of one attempt (DIR an existing attempt dir, not a run's);
    False (nothing printed) otherwise, or when anything but the scheduler went wrong."""
    rest = [a for a in args[1:] if a != "--json"]
    if args[:1] != ["status"] or len(args) > 3 or len(rest) != 1 or rest[0].startswith("-"):
        return False
    try:
        from dd_slurm.control.status import settled_status
        from dd_slurm.store.attempt_files import is_run_dir
        from dd_slurm.store.attempt_record import read_record
        from dd_slurm.store.view import attempt_dir

        if is_run_dir(rest[0]):
            return False
        directory = attempt_dir(rest[0])
        record = read_record(directory)  # once: whether it is settled, and the view's
        view = settled_status(directory, record) or _observed_status(directory, record)
    except Exception:  # whatever went wrong, the click CLI says it (in its one-line form)
        return False
    try:
        sys.stdout.write(_rendered(view, "--json" in args) + "\n")
        sys.stdout.flush()
    except OSError as err:  # a closed pipe: one line, as the click CLI would say it
        _fail(err.strerror or str(err), "EXIT_INVALID")
    if view.get("scheduler_error"):
        _fail(f"scheduler unavailable: {view['scheduler_error']}", "EXIT_SCHEDULER")
    return True


def _observed_status(directory: Path, record: dict) -> dict:
    """The status view with a fresh scheduler observation, as the click command builds it."""
    import os

    from dd_slurm.clock import Clock
    from dd_slurm.control.status import status
    from dd_slurm.scheduler.commands import SlurmCommands

    clock = Clock()
    return status(directory, SlurmCommands.from_environ(clock, os.environ, timeout_s=30.0), clock, record)


def _fail(message: str, code_name: str) -> NoReturn:
    from dd_slurm import errors
    from dd_slurm.cli_output import fail

    fail(message, getattr(errors, code_name))


def _rendered(view: dict, as_json: bool) -> str:
    import json

    from dd_slurm.control.report import printable, status_text

    return json.dumps(view, indent=1, sort_keys=True) if as_json else printable(status_text(view))
