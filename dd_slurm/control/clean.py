"""`dd-slurm clean`: remove finished attempts (and runs) older than a cutoff, then the bundles no
attempt left uses. Never a live one: an attempt is finished only when `list`'s one scheduler
round says how it ended and its job is over (or was never submitted); a run only when every shard
is. A dir is first renamed to a dot-name (atomic), then deleted, so a crash never leaves a
half-removed attempt that looks whole; the next `clean` finishes it."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import InvalidInput
from dd_slurm.store import attempt_files as files

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
REMOVING = ".removing-"
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}-[0-9]{8}T[0-9]{6}-[0-9a-f]{6}")


def parse_age(text: str) -> float:
    """`7d`, `12h`, `30m`, `90s`, `2w` -> seconds."""
    found = DURATION.fullmatch(text.strip())
    if not found:
        raise InvalidInput(f"--older-than: {text!r} is not a duration such as 7d, 12h, 30m")
    return float(found.group(1)) * UNITS[found.group(2)]


def last_change(directory: Path, since: Optional[float]) -> float:
    """When the attempt last changed: the newest of its entries' times, leaving out the record
    (and its lock), which `status` and `list` write whenever they observe, and the dir's own time,
    which those writes move; `since` (its submission or staging) when nothing else is there."""
    times = [since or 0.0]
    for entry in os.scandir(directory):
        if entry.name != files.RECORD and not entry.name.startswith("."):
            times.append(entry.stat(follow_symlinks=False).st_mtime)
    return max(times)


def finished(row: dict[str, Any]) -> bool:
    from dd_slurm.scheduler.states import is_terminal

    return row["effective"] is not None and (row["job_id"] is None or is_terminal(row["job_state"] or ""))


def plan_removal(workspace: Path, rows: list[dict[str, Any]], now: float, older_than_s: float) -> dict[str, Any]:
    """Which attempts and runs go (finished and unchanged for `older_than_s`), which stay and why."""
    old = {r["id"]: finished(r) and now - last_change(Path(r["dir"]), r.get("since")) >= older_than_s for r in rows}
    by_run: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("run"):
            by_run.setdefault(r["run"], []).append(r)
    runs = sorted(run for run, shards in by_run.items() if all(old[s["id"]] for s in shards)
                  and run_dir_of(workspace, run) is not None)
    attempts = [r for r in rows if old[r["id"]] and (not r.get("run") or r["run"] in runs)]
    live = [r["id"] for r in rows if not finished(r)]
    return {"attempts": attempts, "runs": [str(workspace / "runs" / run) for run in runs], "live": live,
            "kept": len(rows) - len(attempts)}


def run_dir_of(workspace: Path, run: Any) -> Optional[Path]:
    """The run's dir from a shard's record, only when it is one: a run id (never a path, `..` or
    empty) naming a real directory directly under runs/."""
    if not isinstance(run, str) or not RUN_ID.fullmatch(run):
        return None
    path = workspace / "runs" / run
    return path if path.is_dir() and not path.is_symlink() and path.parent == workspace / "runs" else None


def unused_bundles(workspace: Path, staying: list[Path], keep: str) -> tuple[list[Path], Optional[str]]:
    """Bundles no staying attempt links to, except `keep` (the one this dd-slurm stages now);
    none when a staying attempt's link cannot be read (then the reason)."""
    used = {keep}
    for directory in staying:
        try:
            used.add(Path(os.readlink(directory / files.BUNDLE_LINK)).name)
        except OSError as err:
            return [], f"bundles kept: {directory.name}'s bundle link is unreadable ({err.strerror})"
    try:
        bundles = sorted(p for p in (workspace / "bundles").iterdir()
                         if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    except FileNotFoundError:
        return [], None
    return [b for b in bundles if b.name not in used], None


def remove_tree(path: Path) -> None:
    """Rename to a dot-name first (atomic: never a half-removed dir under its own name), make
    read-only dirs (bundles) writable, delete."""
    if path.is_symlink():  # never through a link: the link goes, what it names stays
        path.unlink()
        return
    hidden = path.with_name(REMOVING + path.name)
    os.rename(path, hidden)
    delete_hidden(hidden)


def delete_hidden(hidden: Path) -> None:
    if hidden.is_symlink():
        hidden.unlink()
        return
    os.chmod(hidden, 0o700)
    for root, dirs, _ in os.walk(hidden):  # never through a symlink: an attempt's `bundle` link is one
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
    shutil.rmtree(hidden)


def leftovers(workspace: Path) -> list[Path]:
    """Removals an earlier `clean` did not finish."""
    return [p for place in ("attempts", "runs", "bundles") if (workspace / place).is_dir()
            for p in (workspace / place).iterdir() if p.name.startswith(REMOVING)]


def clean(workspace: Path, commands: Any, now: float, older_than_s: float, dry_run: bool) -> dict[str, Any]:
    from dd_slurm.bundle.manifest import planned_sources
    from dd_slurm.control.workspace import list_workspace

    rows = list_workspace(workspace, commands, now)["attempts"]
    chosen = plan_removal(workspace, rows, now, older_than_s)
    going = {r["dir"] for r in chosen["attempts"]}
    staying = [Path(r["dir"]) for r in rows if r["dir"] not in going]
    bundles, bundle_note = unused_bundles(workspace, staying, planned_sources()[0])
    out = {"dry_run": dry_run, "attempts": [r["id"] for r in chosen["attempts"]], "runs": chosen["runs"],
           "bundles": [str(b) for b in bundles], "kept": chosen["kept"], "live": chosen["live"], "note": bundle_note}
    if not dry_run:
        for hidden in leftovers(workspace):
            delete_hidden(hidden)
        for path in [Path(r["dir"]) for r in chosen["attempts"]] + [Path(r) for r in chosen["runs"]] + bundles:
            remove_tree(path)
    return out


def counted(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"


def clean_text(out: dict[str, Any]) -> str:
    verb = "would remove" if out["dry_run"] else "removed"
    lines = [f"{verb} attempt {a}" for a in out["attempts"]] + [f"{verb} run {Path(r).name}" for r in out["runs"]]
    lines += [f"{verb} bundle {Path(b).name}" for b in out["bundles"]]
    lines.append(f"{verb} {counted(len(out['attempts']), 'attempt')}, {counted(len(out['runs']), 'run')}, "
                 f"{counted(len(out['bundles']), 'bundle')}; kept {counted(out['kept'], 'attempt')} "
                 f"({len(out['live'])} not finished)")
    return "\n".join(lines + ([f"note: {out['note']}"] if out["note"] else []))
