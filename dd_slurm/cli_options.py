"""What the `dd-slurm` commands share besides output: the workspace option and its defaults, how a
command names its attempt (a dir, an id in the workspace, `--last`), the clock and the Slurm
command client, each built only when a command needs it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import click

workspace_option = click.option(
    "--workspace", "-w", type=click.Path(file_okay=False),
    help="Where bundles/ and attempts/ live (shared with the compute nodes); default: $DD_SLURM_WORKSPACE, "
         "else `workspace` in ~/.config/dd-slurm/config.toml.")


def attempt_target(function: Callable[..., Any]) -> Callable[..., Any]:
    """ATTEMPT (a dir, or an attempt id or its unique start in the workspace), `--last`, `-w`."""
    function = workspace_option(function)
    function = click.option("--last", is_flag=True, help="The workspace's newest attempt (or run).")(function)
    return click.argument("attempt_dir", metavar="ATTEMPT", required=False, shell_complete=complete_attempt)(function)


def complete_attempt(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list:
    """Tab completion of ATTEMPT: the workspace's attempt and run ids that start with what was
    typed; directories when none does (click's bash script empties the list at a `dir` item and
    lets bash complete directory names only when nothing else matched, so it comes first)."""
    from click.shell_completion import CompletionItem

    from dd_slurm.control.addressing import candidates
    from dd_slurm.control.settings import WORKSPACE_VARIABLE

    items = [CompletionItem(incomplete, type="dir")]
    if "/" not in incomplete:
        try:
            workspace = ctx.params.get("workspace") or os.environ.get(WORKSPACE_VARIABLE) or settings().workspace
        except Exception:  # a broken config file: no ids to offer, paths still
            workspace = None
        if workspace:
            items += [CompletionItem(p.name) for p in sorted(candidates(Path(workspace), True))
                      if p.name.startswith(incomplete)]
    return items


def settings():
    from dd_slurm.control.settings import load_settings

    return load_settings(os.environ)


def workspace_for(option: Optional[str]) -> str:
    """-w, else DD_SLURM_WORKSPACE, else the settings file; an error says all three."""
    from dd_slurm.control.settings import WORKSPACE_VARIABLE, workspace_of

    return option or os.environ.get(WORKSPACE_VARIABLE) or workspace_of(None, os.environ, settings())


def load_user_plan(path: str):
    """The plan file, with the settings' job defaults where it leaves them unset."""
    from dd_slurm.control.settings import with_job_defaults
    from dd_slurm.plan.io import load_plan

    return with_job_defaults(load_plan(path), settings())


def attempt_path(target: Optional[str], last: bool, workspace: Optional[str], runs: bool) -> str:
    """The directory the command means. A path that exists is taken as it is, without reading
    any settings (`status DIR` stays fast)."""
    from dd_slurm.control.addressing import resolve
    from dd_slurm.control.settings import WORKSPACE_VARIABLE

    if target is not None and not last and ("/" in target or Path(target).exists()):
        return target
    return resolve(target, last, workspace or os.environ.get(WORKSPACE_VARIABLE) or settings().workspace, runs)


def clock():
    from dd_slurm.clock import Clock

    return Clock()


def commands(timeout_s: float = 30.0):
    from dd_slurm.scheduler.commands import SlurmCommands

    return SlurmCommands.from_environ(clock(), os.environ, timeout_s=timeout_s)


class LazyCommands:
    """The command client, built (and its modules imported) only if a Slurm tool is needed: the
    status of a finished attempt needs none, and runs from a fresh process."""

    def __init__(self) -> None:
        self._real = None

    def __getattr__(self, name: str):
        if self._real is None:
            self._real = commands()
        return getattr(self._real, name)
