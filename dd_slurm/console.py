"""The `dd-slurm` console script. `status [--json] DIR` of an attempt whose job has ended, as
accounting recorded it, is printed from disk without importing click (half a fresh process's
time): what a script polling many attempts runs most. Anything else, including every error and
every other shape of arguments, is the click CLI's (dd_slurm.cli), which prints the same view.
So is the supervisor's `run DIR --bundle-digest D --plan-digest P`, the words the rendered batch
script passes (the bundle's entry.py calls this main): click would be a fifth of its start-up
before any server can start. Its errors are the click CLI's lines and exit codes (cli_output.fail_for)."""

from __future__ import annotations

import sys
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
    """Printed `status [--json] DIR` of one settled attempt; False (nothing printed) otherwise."""
    rest = [a for a in args[1:] if a != "--json"]
    if args[:1] != ["status"] or len(args) > 3 or len(rest) != 1 or rest[0].startswith("-"):
        return False
    try:
        from dd_slurm.control.status import settled_status
        from dd_slurm.store.run_record import is_run_dir
        from dd_slurm.store.view import attempt_dir

        view = None if is_run_dir(rest[0]) else settled_status(attempt_dir(rest[0]))
    except Exception:  # whatever went wrong, the click CLI says it (in its one-line form)
        return False
    if view is None:
        return False
    try:
        sys.stdout.write(_rendered(view, "--json" in args) + "\n")
        sys.stdout.flush()
    except OSError as err:  # a closed pipe: one line, as the click CLI would say it
        from dd_slurm.cli import fail
        from dd_slurm.errors import EXIT_INVALID

        fail(err.strerror or str(err), EXIT_INVALID)
    return True


def _rendered(view: dict, as_json: bool) -> str:
    import json

    from dd_slurm.control.report import printable, status_text

    return json.dumps(view, indent=1, sort_keys=True) if as_json else printable(status_text(view))
