"""Which attempt a command means: a directory, an attempt id (or the unique start of one) in the
workspace, or `--last`, the newest."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from dd_slurm.errors import InvalidInput

ID_STAMP = re.compile(r"-(\d{8}T\d{6})-[0-9a-f]{6}(?:-s\d+)?$")
SHARD_SUFFIX = re.compile(r"-s\d+$")


def resolve(target: Optional[str], last: bool, workspace: Optional[str], runs: bool) -> str:
    """The directory `target` names: itself when it is a path that exists (or has a `/`), else the
    attempt (with `runs`, or run) of that id or id prefix in `workspace`; with `last`, the newest
    there (with `runs`, a run counts as one, not as its shards)."""
    if last:
        if target is not None:
            raise InvalidInput(f"--last names the attempt; {target!r} would name another")
        return str(newest(_workspace(workspace, "--last"), runs))
    if target is None:
        raise InvalidInput("name an attempt: its directory, its id, or --last")
    if "/" in target or Path(target).exists() or workspace is None:
        return target
    return str(by_id(Path(workspace), target, runs))


def _workspace(workspace: Optional[str], what: str) -> Path:
    if workspace is None:
        import os

        from dd_slurm.control.settings import config_path

        where = config_path(os.environ) or "~/.config/dd-slurm/config.toml"
        raise InvalidInput(f"{what} needs a workspace: pass -w DIR, set DD_SLURM_WORKSPACE, or set workspace in {where}")
    return Path(workspace)


def candidates(workspace: Path, runs: bool) -> list[Path]:
    places = [workspace / "attempts"] + ([workspace / "runs"] if runs else [])
    found = []
    for place in places:
        try:
            found += [p for p in place.iterdir() if not p.name.startswith(".") and p.is_dir()]
        except FileNotFoundError:
            continue
    return found


def by_id(workspace: Path, name: str, runs: bool) -> Path:
    found = candidates(workspace, runs)
    exact = [p for p in found if p.name == name]
    if exact:
        return exact[0]
    if not runs and (workspace / "runs" / name).is_dir():
        raise InvalidInput(f"{name}: a run of shards, not one attempt (status and cancel take it; otherwise name a "
                           "shard: dd-slurm list)")
    matching = sorted(p for p in found if p.name.startswith(name))
    matching.sort(key=lambda p: p.parent.name != "runs")  # a run first: it is what a prefix of its shards means
    if len(matching) == 1:
        return matching[0]
    if not matching:
        raise InvalidInput(f"{name}: no such attempt directory, nor an attempt id in {workspace}"
                           " (dd-slurm list shows them)")
    shown = ", ".join(p.name for p in matching[:4]) + (f" and {len(matching) - 4} more" if len(matching) > 4 else "")
    raise InvalidInput(f"{name}: names {len(matching)} attempts in {workspace}: {shown}")


def newest(workspace: Path, runs: bool) -> Path:
    """The newest by the time in its id, then by its directory's change time; with `runs`, a
    run's shards stand behind their run."""
    found = [p for p in candidates(workspace, runs) if ID_STAMP.search(p.name)]
    if runs:
        run_ids = {p.name for p in found if p.parent.name == "runs"}
        found = [p for p in found if SHARD_SUFFIX.sub("", p.name) not in run_ids or p.parent.name == "runs"]
    if not found:
        raise InvalidInput(f"--last: {workspace} has no attempt yet")
    return max(found, key=lambda p: (ID_STAMP.search(p.name).group(1), p.stat().st_mtime_ns, p.name))  # type: ignore[union-attr]
