"""`dd-slurm logs`: the attempt's log files by name, printed whole or followed like `tail -f`.

Names are the files in the attempt's `logs/` dir without their suffix (`client`, `preflight`,
`deploy-big-0`, ...); the batch log `batch-<job id>.out` is `batch`. The batch script execs the
supervisor, so its output is the batch log: `supervisor` names it unless a `supervisor.log`
exists. Only regular files are listed or opened (no symlinks): the dir is written by the job.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Optional

import attrs

from dd_slurm.clock import Clock
from dd_slurm.errors import AttemptDirError, InvalidInput
from dd_slurm.store import attempt_files as files

_BATCH = re.compile(r"batch-(\d+(?:_\d+)?)\.out\Z")
CHUNK = 64 * 1024


@attrs.frozen
class LogFile:
    name: str
    path: Path
    size: int
    note: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "file": str(self.path), "bytes": self.size, "note": self.note or None}


def _regular(directory: Path) -> list[os.DirEntry]:
    try:
        return sorted((e for e in os.scandir(directory) if e.is_file(follow_symlinks=False)), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise AttemptDirError(f"{directory}: cannot list logs ({err.strerror})") from None


def list_logs(attempt_dir: Path) -> list[LogFile]:
    """Every log of the attempt, the batch log first; a later job's batch log wins the name `batch`."""
    entries = _regular(Path(attempt_dir) / files.LOGS_DIR)
    batch = sorted((e for e in entries if _BATCH.match(e.name)), key=lambda e: (e.stat().st_mtime, e.name))
    found = [LogFile(e.name.rsplit(".", 1)[0], Path(e.path), e.stat().st_size) for e in batch[:-1]]
    if batch:
        note = "" if any(e.name == files.SUPERVISOR_LOG for e in entries) else "the supervisor's output"
        found.insert(0, LogFile("batch", Path(batch[-1].path), batch[-1].stat().st_size, note))
    for entry in entries:
        if not _BATCH.match(entry.name):
            found.append(LogFile(entry.name.rsplit(".", 1)[0] if "." in entry.name else entry.name,
                                 Path(entry.path), entry.stat().st_size))
    return found


def find_log(attempt_dir: Path, name: str) -> Path:
    """The file a name means; an unknown name is an error listing the known ones."""
    logs = list_logs(attempt_dir)
    by_name = {log.name: log.path for log in logs}
    if name == "supervisor" and "supervisor" not in by_name and "batch" in by_name:
        return by_name["batch"]
    if name in by_name:
        return by_name[name]
    known = ", ".join(log.name for log in logs) or "none yet (has the job started?)"
    raise InvalidInput(f"logs: no log named {name!r} in {attempt_dir}; known: {known}")


_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def last_lines(path: Path, count: int = 10, window: int = 16 * 1024) -> list[str]:
    """The last `count` lines of a log (from its last `window` bytes), each with control
    characters shown as '?': a process's bytes do not get to drive the user's terminal."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - window))
            text = log.read(window).decode("utf-8", "replace")
    except OSError:
        return []
    return [_UNPRINTABLE.sub("?", line.rstrip()) for line in text.splitlines()[-count:]]


def failure_ending(attempt_dir: Path) -> list[str]:
    """What a failed `--wait` or `--watch` ends with (report_inspect.failure_report): read from
    the attempt dir only."""
    from dd_slurm.control.report_inspect import failure_and_log, failure_report
    from dd_slurm.store.view import inspect_attempt

    try:
        view = inspect_attempt(attempt_dir)
    except AttemptDirError as err:
        return [f"(no failure report: {err})"]
    found = failure_and_log(view)
    try:
        tail = last_lines(find_log(attempt_dir, found[1])) if found else []
    except InvalidInput:
        tail = []  # the log was never written: the failure line says why
    return failure_report(view, tail)


def human_size(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def listing_text(logs: list[LogFile], attempt_dir: Path) -> str:
    """Name, size and file relative to the attempt dir (`logs/client.log`; `--json` gives full paths)."""
    if not logs:
        return f"no logs yet in {Path(attempt_dir) / files.LOGS_DIR}"
    width = max(len(log.name) for log in logs)
    return "\n".join(f"{log.name:<{width}}  {human_size(log.size):>10}  {_relative(log.path, attempt_dir)}"
                     + (f"  ({log.note})" if log.note else "") for log in logs)


def _relative(path: Path, attempt_dir: Path) -> str:
    try:
        return str(Path(path).relative_to(attempt_dir))
    except ValueError:
        return str(path)


def _open(path: Path) -> Optional[int]:
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise AttemptDirError(f"{path}: cannot open ({err.strerror})") from None


def read_chunks(path: Path) -> Iterator[bytes]:
    fd = _open(path)
    if fd is None:
        raise AttemptDirError(f"{path}: the log disappeared")
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk


def follow(path: Path, finished: Callable[[], bool], clock: Clock, write: Callable[[bytes], None],
           interval_s: float = 0.5, quiet_polls: int = 2) -> None:
    """Print what is there, then what is appended, until `finished()` holds and the file has not
    grown for `quiet_polls` polls. A file that is truncated is read again from its start."""
    position, quiet = 0, 0
    while True:
        grew = False
        fd = _open(path)
        if fd is not None:
            with os.fdopen(fd, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < position:
                    position = 0
                handle.seek(position)
                while chunk := handle.read(CHUNK):
                    write(chunk)
                    position += len(chunk)
                    grew = True
        quiet = 0 if grew else quiet + 1
        if quiet >= quiet_polls and finished():
            return
        clock.sleep(interval_s)


def await_log(attempt_dir: Path, name: str, finished: Callable[[], bool], clock: Clock,
              interval_s: float = 0.5) -> Path:
    """For following: a log that is not there yet (the job is pending, the client has not started)
    is waited for while the attempt can still write it."""
    while True:
        try:
            return find_log(attempt_dir, name)
        except InvalidInput:
            if finished():
                raise
        clock.sleep(interval_s)


def attempt_finished(attempt_dir: Path) -> bool:
    """Nothing more will be written: the attempt is done, or its supervisor has exited."""
    from dd_slurm.store.view import attempt_summary, read_json

    if attempt_summary(attempt_dir)["state"] == "done":
        return True
    supervisor = read_json(Path(attempt_dir) / files.SUPERVISOR)
    return isinstance(supervisor, dict) and supervisor.get("state") == "exited"


def show(attempt_dir: Path, name: str, follow_: bool, clock: Clock, out: BinaryIO) -> None:
    """Print one log; with `follow_`, until the attempt is finished (Ctrl-C ends it quietly)."""

    def write(chunk: bytes) -> None:
        out.write(chunk)
        out.flush()

    if not follow_:
        for chunk in read_chunks(find_log(attempt_dir, name)):
            write(chunk)
        return
    def finished() -> bool:
        return attempt_finished(attempt_dir)

    try:
        follow(await_log(attempt_dir, name, finished, clock), finished, clock, write)
    except KeyboardInterrupt:  # Ctrl-C ends following; not an error
        out.flush()
