"""Candidate result validation and the result manifest: record count, size and sha256, all from
one read of one open file."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.plan.fields import expand
from dd_slurm.plan.records import Result

BLOCK = 1 << 20


def read_result(path: Path, fmt: str, opener: Callable = open, partial: bool = False,
                out_of_time: Callable[[], bool] = lambda: False) -> tuple[Optional[int], int, str]:
    """(records, bytes, sha256) from one pass over one open file, so all three describe the same
    bytes; raises ValueError when the content does not parse in its format, or when
    `out_of_time()` says so between blocks. `partial`: a JSON lines file cut mid-line counts its
    complete lines only."""
    digest, size = hashlib.sha256(), 0
    counter = _JsonLines(complete_only=True) if partial and fmt == "jsonl" else _counter(fmt)
    with opener(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            if out_of_time():
                raise ValueError(f"not read to its end within cleanup's budget ({size} bytes read)")
            digest.update(block)
            size += len(block)
            counter.feed(block)
    return counter.done(), size, digest.hexdigest()


def _counter(fmt: str) -> _Counter:
    return {"jsonl": _JsonLines, "json": _Json, "parquet": _Parquet}.get(fmt, _Counter)()


class _Counter:
    """Format `file`: no records to count."""

    def feed(self, block: bytes) -> None:
        return

    def done(self) -> Optional[int]:
        return None


class _JsonLines(_Counter):
    def __init__(self, complete_only: bool = False) -> None:
        self.count, self.number, self.rest = 0, 0, b""
        self.complete_only = complete_only  # a last line without its newline is not a record

    def feed(self, block: bytes) -> None:
        lines = (self.rest + block).split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        self.number += 1
        if line.strip():
            try:
                json.loads(line)
            except ValueError as err:
                raise ValueError(f"line {self.number}: {err}") from None
            self.count += 1

    def done(self) -> int:
        if self.rest and not self.complete_only:
            self._line(self.rest)
        return self.count


class _Json(_Counter):
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def feed(self, block: bytes) -> None:
        self.chunks.append(block)

    def done(self) -> int:
        value = json.loads(b"".join(self.chunks))
        return len(value) if isinstance(value, list) else 1


class _Parquet(_Json):
    """The footer is at the end: the bytes are kept (as json's are) and read by the footer parser."""

    def done(self) -> int:
        from dd_slurm.runtime.parquet_rows import parquet_rows_of

        return parquet_rows_of(b"".join(self.chunks))


def validate_result(results_dir: Path, spec: Result, shard: tuple[int, int] = (0, 1), opener: Callable = open,
                    partial: bool = False, out_of_time: Callable[[], bool] = lambda: False) -> dict:
    """The manifest of a valid candidate; AttemptFailure with a reason code otherwise. `shard`
    (index, count) fills `{shard_index}` and `{num_shards}` in the path. `partial` (what a stopped
    client wrote): no `min_records`, complete JSON lines only, and `"partial": true`."""
    root = Path(results_dir).resolve()
    name = expand(spec.path, {"shard_index": str(shard[0]), "num_shards": str(shard[1])})
    path = (root / name)
    if not path.is_file():
        raise AttemptFailure("result_missing", f"{name} was not written; {held_by(root)}")
    if root not in path.resolve().parents:
        raise AttemptFailure("result_outside_results_dir", f"{name} resolves outside the results dir")
    try:
        records, size, sha256 = read_result(path, spec.format, opener, partial, out_of_time)
    except (ValueError, OSError) as err:
        raise AttemptFailure("result_invalid", f"{name} is not valid {spec.format}: {err}") from None
    if partial:
        return {"path": name, "format": spec.format, "records": records, "bytes": size, "sha256": sha256,
                "partial": True}
    if spec.format == "file" and spec.min_records and size == 0:
        raise AttemptFailure("result_invalid", f"{name} is empty")
    if records is not None and records < spec.min_records:
        raise AttemptFailure("result_too_few_records", f"{name} has {records} records, needs {spec.min_records}")
    return {"path": name, "format": spec.format, "records": records, "bytes": size, "sha256": sha256}


def with_images(manifest: dict, attempt_dir: Path) -> dict:
    """The manifest with the container images the attempt ran (provenance), when it ran any."""
    from dd_slurm.runtime.images import read_used

    used = read_used(attempt_dir)
    return {**manifest, "images": used} if used else manifest


def held_by(root: Path, most: int = 8) -> str:
    """What the results dir holds, for a result that is missing: its first entries by name."""
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir())
    except OSError as err:
        return f"the results dir cannot be listed ({err.strerror or err})"
    if not names:
        return "the results dir is empty"
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return f"the results dir holds {', '.join(names[:most])}{more}"


def keep_partial(attempt_dir: Path, results_dir: Path, spec: Result, shard: tuple[int, int],
                 out_of_time: Callable[[], bool] = lambda: False) -> str:
    """After a stop: what the client wrote, validated but for `min_records`, kept with a manifest
    that says `partial`; the line for the batch log either way. Reading stops when `out_of_time()`
    (Slurm's SIGKILL must find the attempt's end journaled)."""
    from dd_slurm.store import attempt_files as files
    from dd_slurm.store.atomic import write_json_atomic

    try:
        manifest = validate_result(results_dir, spec, shard, partial=True, out_of_time=out_of_time)
    except AttemptFailure as err:
        return f"partial result not kept: {err.reason}: {err.detail}"
    write_json_atomic(Path(attempt_dir) / files.RESULT_MANIFEST, with_images(manifest, Path(attempt_dir)))
    return f"partial result kept: {manifest['path']}, {manifest['records']} records"
