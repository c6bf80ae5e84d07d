"""Candidate result validation and the result manifest (digest, size, record count)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from dd_slurm.bundle.manifest import sha256_file
from dd_slurm.errors import AttemptFailure
from dd_slurm.plan import Result

MANIFEST_NAME = "result-manifest.json"


def count_records(path: Path, fmt: str) -> Optional[int]:
    """Records in the file by its format; raises ValueError when it does not parse."""
    if fmt == "jsonl":
        count = 0
        with open(path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        json.loads(line)
                    except ValueError as err:
                        raise ValueError(f"line {number}: {err}") from None
                    count += 1
        return count
    if fmt == "json":
        value = json.loads(Path(path).read_bytes())
        return len(value) if isinstance(value, list) else 1
    if fmt == "parquet":
        from dd_slurm.runtime.parquet_rows import parquet_num_rows

        return parquet_num_rows(path)
    return None


def validate_result(results_dir: Path, spec: Result) -> dict:
    """The manifest of a valid candidate; AttemptFailure with a reason code otherwise."""
    root = Path(results_dir).resolve()
    path = (root / spec.path)
    if not path.is_file():
        raise AttemptFailure("result_missing", f"{spec.path} was not written")
    if root not in path.resolve().parents:
        raise AttemptFailure("result_outside_results_dir", f"{spec.path} resolves outside the results dir")
    try:
        records = count_records(path, spec.format)
    except (ValueError, OSError) as err:
        raise AttemptFailure("result_invalid", f"{spec.path} is not valid {spec.format}: {err}") from None
    if spec.format == "file" and spec.min_records and os.path.getsize(path) == 0:
        raise AttemptFailure("result_invalid", f"{spec.path} is empty")
    if records is not None and records < spec.min_records:
        raise AttemptFailure("result_too_few_records", f"{spec.path} has {records} records, needs {spec.min_records}")
    return {"path": spec.path, "format": spec.format, "records": records, "bytes": os.path.getsize(path),
            "sha256": sha256_file(path)}

