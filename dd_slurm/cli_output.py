"""What every `dd-slurm` command prints with: the --json option, one view as JSON or text, and the
one `error:` line and exit code (used by cli.py and cli_runtime.py alike)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from dd_slurm.control.report import printable
from dd_slurm.errors import EXIT_INVALID, DdSlurmError

json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def emit(value: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    click.echo(json.dumps(value, indent=1, sort_keys=True) if as_json else printable(text(value)))


def fail(message: str, code: int) -> NoReturn:
    one_line = " / ".join(part for part in str(message).splitlines() if part.strip()) or "failed"
    click.echo(f"error: {printable(one_line)}", err=True)
    sys.exit(code)


def fail_for(error: BaseException) -> NoReturn:
    """The one `error:` line and exit code for what a command raised (console.py's click-free
    paths hand theirs here too)."""
    try:
        raise error
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.UsageError as err:  # one line and a hint, not click's four
        command = err.ctx.command_path if err.ctx else "dd-slurm"
        fail(f"{err.format_message()} (try '{command} --help')", EXIT_INVALID)
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
    except Exception as err:
        fail(f"internal error ({type(err).__name__}: {err}); please report it", 1)


IN_ALLOCATION = ("run", "advance")  # what the batch script runs; a user rarely types them


class SectionedGroup(click.Group):
    """`--help` lists the user's commands first and the in-allocation ones apart."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = [n for n in self.list_commands(ctx) if not self.commands[n].hidden]
        for title, group in (("Commands", [n for n in names if n not in IN_ALLOCATION]),
                             ("Inside the allocation (the batch script runs these)",
                              [n for n in names if n in IN_ALLOCATION])):
            rows = [(n, self.commands[n].get_short_help_str(formatter.width - 16)) for n in group]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
