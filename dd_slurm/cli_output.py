"""What every `dd-slurm` command prints with: the --json option, one view as JSON or text, and the
one `error:` line and exit code (used by cli.py and cli_runtime.py alike)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from dd_slurm.control.report import printable

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def emit(value: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    click.echo(json.dumps(value, indent=1, sort_keys=True) if as_json else printable(text(value)))


def fail(message: str, code: int) -> NoReturn:
    one_line = " / ".join(part for part in str(message).splitlines() if part.strip()) or "failed"
    click.echo(f"error: {printable(one_line)}", err=True)
    sys.exit(code)
