"""The one atomic write: temp file in the same dir, fsync, rename, fsync the dir."""

from __future__ import annotations

import json
import os

# Standard library only, and no pathlib or typing: every on-node command imports this module, and
# each of a large allocation's steps pays its imports.
TYPE_CHECKING = False  # mypy reads this name as True
if TYPE_CHECKING:
    from collections.abc import Callable


# The temp file is new (O_EXCL: never a file or symlink already there, so O_NOFOLLOW is belt and
# braces), and no program a step starts meanwhile inherits it.
TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def random_temp_name(name: str) -> str:
    """`.NAME.<16 random hex digits>.tmp`: nobody can plant anything at it ahead of the write."""
    return f".{name}.{os.urandom(8).hex()}.tmp"


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o600, durable: bool = True,
                 temp_name: Callable[[str], str] = random_temp_name) -> None:
    """Replace `path` with `data` so that readers see the old file or the new one, never a mix.
    `durable=False` skips the fsyncs, for writers of many files that end with `sync_filesystem`.
    `temp_name(name)`: the temp file's name in the same dir; whatever is at it already is an error
    (FileExistsError), left as it is."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, temp_name(name))
    fd = os.open(tmp, TEMP_FLAGS, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        _fsync_dir(directory or ".")


def sync_filesystem(path: str | os.PathLike[str]) -> None:
    """Make every write so far on `path`'s file system durable with one syncfs(2): a thousand
    files cost one journal commit instead of a thousand."""
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syncfs(fd) != 0:
            os.sync()
    except (OSError, AttributeError):
        os.sync()
    finally:
        os.close(fd)


def write_json_atomic(path: str | os.PathLike[str], value: object, mode: int = 0o600, durable: bool = True) -> None:
    write_atomic(path, dump_json(value), mode, durable)


def dump_json(value: object) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
