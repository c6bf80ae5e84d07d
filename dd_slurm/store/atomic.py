"""The one atomic write: temp file in the same dir, fsync, rename, fsync the dir."""

from __future__ import annotations

import json
import os

# Standard library only, and no pathlib or typing: every on-node command imports this module, and
# each of a large allocation's steps pays its imports.


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Replace `path` with `data` so that readers see the old file or the new one, never a mix.
    `durable=False` skips the fsyncs, for writers of many files that end with `sync_filesystem`."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
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
