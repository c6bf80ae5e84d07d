"""The `dd-slurm` console script. `status [--json] DIR` of an attempt whose job has ended, as
accounting recorded it, is printed from disk without importing click (half a fresh process's
time): what a script polling many attempts runs most. Anything else, including every error and
every other shape of arguments, is the click CLI's (dd_slurm.cli), which prints the same view."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if not answered_from_disk(args):
        from dd_slurm.cli import main as cli_main

        cli_main(args)


def answered_from_disk(args: list[str]) -> bool:
    """Printed `status [--json] DIR` of one settled attempt; False (nothing printed) otherwise."""
    rest = [a for a in args[1:] if a != "--json"]
    if args[:1] != ["status"] or len(args) > 3 or len(rest) != 1 or rest[0].startswith("-"):
        return False
    try:
        from dd_slurm.control import settled_status
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

    from dd_slurm.report import printable, status_text

    return json.dumps(view, indent=1, sort_keys=True) if as_json else printable(status_text(view))
