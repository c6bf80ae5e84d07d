"""Container images, checked before any server starts: every image file the plan names is hashed
(sha256) and held to its `image_sha256` when the plan gives one. A multi-gigabyte image is hashed
once: the digest is remembered in the workspace by (path, device, inode, size, mtime), so a changed
file is hashed again. What was used (image and digest per deployment and the client) is written
to the attempt's images.json, for the result manifest."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import VerificationError
from dd_slurm.plan.records import Container, Plan
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic

CACHE_ENTRIES = 64
CHUNK = 1 << 20
CHECK_EVERY = 64  # chunks between calls of the caller's check (a signal decides within ~64 MiB)
_HEX = re.compile(r"[0-9a-f]{64}")


def containers(plan: Plan) -> dict[str, Container]:
    """Where each image is used (`deployments.NAME`, `client`)."""
    named = {f"deployments.{d.name}": d.container for d in plan.deployments}
    named["client"] = plan.client.container
    return {where: c for where, c in named.items() if c is not None}


def file_key(path: str, info: os.stat_result) -> str:
    return f"{path}|{info.st_dev}|{info.st_ino}|{info.st_size}|{info.st_mtime_ns}"


def read_cache(cache_file: Path) -> dict[str, str]:
    """The remembered digests; anything malformed is left out (read back from disk: validated)."""
    try:
        data = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and _HEX.fullmatch(v)}


def hash_file(path: str, check: Callable[[], None]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for count, chunk in enumerate(iter(lambda: handle.read(CHUNK), b"")):
            digest.update(chunk)
            if count % CHECK_EVERY == CHECK_EVERY - 1:
                check()
    return digest.hexdigest()


def image_sha256(path: str, cache_file: Path, check: Callable[[], None] = lambda: None) -> str:
    """The file's sha256, from the cache when the file is the one hashed before."""
    key = file_key(path, os.stat(path))
    cache = read_cache(cache_file)
    if key in cache:
        return cache[key]
    digest = hash_file(path, check)
    if file_key(path, os.stat(path)) == key:  # unchanged while it was read: worth remembering
        cache.pop(key, None)
        cache[key] = digest
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache_file, dict(list(cache.items())[-CACHE_ENTRIES:]), durable=False)
    return digest


def check_images(plan: Plan, cache_file: Path, check: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Each image file's digest, held to the plan's image_sha256; image_missing when it cannot be
    read here, image_digest when it differs. A registry reference has no digest here (pyxis pulls it)."""
    used: dict[str, Any] = {}
    for where, container in containers(plan).items():
        digest: Optional[str] = None
        if container.image.startswith("/"):
            try:
                digest = image_sha256(container.image, cache_file, check)
            except OSError as err:
                raise VerificationError("image_missing", f"{where}.container.image {container.image}: "
                                                         f"{err.strerror or err}") from None
            if container.image_sha256 is not None and digest != container.image_sha256:
                raise VerificationError("image_digest", f"{where}.container.image {container.image} has sha256 "
                                                        f"{digest}, the plan says {container.image_sha256}")
        used[where] = {"image": container.image, "sha256": digest}
    return used


def write_used(attempt_dir: Path, used: dict[str, Any]) -> None:
    write_json_atomic(attempt_dir / files.IMAGES, used)


def read_used(attempt_dir: Path) -> Optional[dict[str, Any]]:
    """images.json as the supervisor wrote it, or None (none used, or not a mapping of entries)."""
    try:
        data = json.loads((attempt_dir / files.IMAGES).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and all(isinstance(v, dict) and isinstance(v.get("image"), str) and
                                        (v.get("sha256") is None or isinstance(v.get("sha256"), str))
                                        for v in data.values())
    return data if ok and data else None
