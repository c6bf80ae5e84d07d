"""Node-local copies of model weights (runs on the nodes; standard library only).

A deployment's `weights.path` (a file or a directory tree on shared storage) is copied once per
node to `<local_dir>/dd-slurm-weights-<uid>/<digest>-<name>`, where every replica on the node (and
every later attempt) reads it. Under a per-copy lock the copy is written beside its final name
(`.partial.<node>.<pid>`), renamed into place when complete, and only then gets its manifest
(relative paths, sizes and mtimes of the source): the manifest is the mark of a finished copy. A
copy is used only while its manifest equals the source's; a copy without one (interrupted), a
stale one (the source changed) and any partial left by a killed stager are removed and copied
again. Files are copied side by side, large ones in chunks, with copy_file_range where the kernel
has it (else pread/pwrite)."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import stat
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

CHUNK = 64 << 20
WORKERS = 8
MANIFEST_SUFFIX = ".manifest.json"


class WeightsProblem(Exception):
    """A staging failure with its reason code (`weights_missing`, `weights_space`, `weights_staging`)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def copy_path(source: str, local_dir: Optional[str], node: str, tmpdir: Optional[str], uid: int) -> str:
    """Where `source` is copied on `node`: the same on every call, so the supervisor can name it
    in `{weights}` before the copy exists. null local_dir: $SLURM_TMPDIR, else /tmp."""
    base = (local_dir or tmpdir or "/tmp").replace("{node}", node)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return os.path.join(base, f"dd-slurm-weights-{uid}", f"{digest}-{os.path.basename(source.rstrip('/')) or 'root'}")


def source_manifest(source: str) -> dict[str, Any]:
    """The source's files (relative path, size, mtime in ns), followed through symlinks; a missing
    or unreadable source is `weights_missing`."""
    try:
        top = os.stat(source)
        if stat.S_ISREG(top.st_mode):
            _readable(source)
            return {"kind": "file", "files": [["", top.st_size, top.st_mtime_ns]]}
        if not stat.S_ISDIR(top.st_mode):
            raise WeightsProblem("weights_missing", f"{source} is neither a file nor a directory")
        entries = []
        for folder, dirs, names in os.walk(source, followlinks=True, onerror=_raise):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(folder, name)
                info = os.stat(full)
                if stat.S_ISREG(info.st_mode):
                    _readable(full)
                    entries.append([os.path.relpath(full, source), info.st_size, info.st_mtime_ns])
        return {"kind": "dir", "files": entries}
    except OSError as err:
        raise WeightsProblem("weights_missing", f"{err.filename or source}: {err.strerror}") from None


def _raise(err: OSError) -> None:
    raise err


def _readable(path: str) -> None:
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))


def manifest_bytes(manifest: dict[str, Any]) -> int:
    return sum(size for _rel, size, _mtime in manifest["files"])


def reusable(target: str, manifest: dict[str, Any], source: str) -> bool:
    """A finished copy of exactly this source: its manifest is there and equals the source's."""
    try:
        with open(target + MANIFEST_SUFFIX, encoding="utf-8") as handle:
            kept = json.load(handle)
    except (OSError, ValueError):
        return False
    return kept == {"source": source, **manifest} and os.path.lexists(target)


def space_problem(target: str, need: int) -> Optional[str]:
    """Why `need` bytes do not fit where `target` goes (the nearest existing parent's file system)."""
    folder = os.path.dirname(target)
    while not os.path.isdir(folder) and folder != os.path.dirname(folder):
        folder = os.path.dirname(folder)
    try:
        info = os.statvfs(folder)
    except OSError as err:
        return f"{folder}: {err.strerror}"
    free = info.f_bavail * info.f_frsize
    return None if free >= need else f"{target}: {need} bytes needed, {free} free in {folder}"


def check(source: str, target: str) -> list[dict[str, str]]:
    """The node probe's view: the source is readable, and a copy fits unless a good one is there."""
    try:
        manifest = source_manifest(source)
    except WeightsProblem as err:
        return [{"reason": err.reason, "detail": err.detail}]
    if reusable(target, manifest, source):
        return []
    problem = space_problem(target, manifest_bytes(manifest))
    return [{"reason": "weights_space", "detail": problem}] if problem else []


def own_dir(folder: str) -> None:
    """Our per-user directory under local_dir: made 0700 if absent; refused when it is a symlink,
    another user's, or open to others (a shared /tmp is anyone's to write)."""
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise WeightsProblem("weights_staging", f"{folder} is not a private directory of this user")


def stage(source: str, target: str, node: str, workers: int = WORKERS) -> dict[str, Any]:
    """The node's copy of `source` at `target`, made or reused; what it took."""
    started = time.monotonic()
    own_dir(os.path.dirname(target))
    with open(target + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = source_manifest(source)
        total = manifest_bytes(manifest)
        reused = reusable(target, manifest, source)
        if not reused:
            remove_copies(target)
            problem = space_problem(target, total)
            if problem:
                raise WeightsProblem("weights_space", problem)
            partial = f"{target}.partial.{node}.{os.getpid()}"
            copy_tree(source, partial, manifest, workers)
            os.rename(partial, target)
            write_manifest(target, {"source": source, **manifest})
    return {"source": source, "target": target, "reused": reused, "bytes": total,
            "files": len(manifest["files"]), "seconds": round(time.monotonic() - started, 3), "ended_at": time.time()}


def remove_copies(target: str) -> None:
    """Everything but the lock under this copy's name: a stale or unfinished copy, its manifest,
    and partials of stagers that were killed (the lock is ours, so none is being written)."""
    folder, name = os.path.split(target)
    for entry in os.listdir(folder):
        if entry == name or entry.startswith(name + ".partial.") or entry == name + MANIFEST_SUFFIX:
            path = os.path.join(folder, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)


def write_manifest(target: str, manifest: dict[str, Any]) -> None:
    temporary = f"{target}{MANIFEST_SUFFIX}.{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    os.rename(temporary, target + MANIFEST_SUFFIX)


def copy_tree(source: str, partial: str, manifest: dict[str, Any], workers: int) -> None:
    """Every file of the manifest into `partial`, sized first, then filled chunk by chunk side by side."""
    pairs = [(source, partial)] if manifest["kind"] == "file" else \
        [(os.path.join(source, rel), os.path.join(partial, rel)) for rel, _size, _mtime in manifest["files"]]
    if manifest["kind"] == "dir":
        os.makedirs(partial)
    chunks = []
    for (src, dst), (_rel, size, _mtime) in zip(pairs, manifest["files"]):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as handle:
            handle.truncate(size)
        chunks += [(src, dst, offset, min(CHUNK, size - offset)) for offset in range(0, size, CHUNK)]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(lambda chunk: copy_chunk(*chunk), chunks))
    for src, dst in pairs:
        if os.path.getsize(src) != os.path.getsize(dst):
            raise WeightsProblem("weights_staging", f"{src} changed size while it was copied")


def copy_chunk(src: str, dst: str, offset: int, length: int) -> None:
    source_fd = os.open(src, os.O_RDONLY)
    try:
        target_fd = os.open(dst, os.O_WRONLY)
        try:
            done = 0
            while done < length:
                moved = _move(source_fd, target_fd, offset + done, length - done)
                if moved == 0:
                    raise WeightsProblem("weights_staging", f"{src} ended early (changed while copied)")
                done += moved
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)


def _move(source_fd: int, target_fd: int, offset: int, length: int) -> int:
    try:
        return os.copy_file_range(source_fd, target_fd, length, offset, offset)
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            raise
    data = os.pread(source_fd, min(length, 1 << 20), offset)
    return os.pwrite(target_fd, data, offset) if data else 0


def stage_command(request_path: str, node: str) -> int:
    """`_stage REQUEST`: every copy the request names for this node, one answer line; a failure is
    in the answer (reason and detail) and the exit code."""
    with open(request_path, encoding="utf-8") as handle:
        request = json.load(handle)
    staged, problem = [], None
    for item in request["nodes"].get(node, []):
        try:
            staged.append(stage(item["source"], item["target"], node))
        except WeightsProblem as err:
            problem = {"reason": err.reason, "detail": err.detail}
            break
        except OSError as err:
            problem = {"reason": "weights_staging", "detail": f"{err.filename or item['target']}: {err.strerror}"}
            break
    print(json.dumps({"node": node, "staged": staged, "problem": problem}), flush=True)
    return 1 if problem else 0
