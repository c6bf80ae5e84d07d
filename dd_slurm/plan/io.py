"""Plans in and out: load and parse (strict JSON, then the one converter), dump, canonical JSON, digest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from dd_slurm.errors import PlanError
from dd_slurm.plan.records import Plan


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file; every failure is a PlanError naming the field."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise PlanError("", f"cannot read plan {path}: {err.strerror}") from None
    return parse_plan(raw)


def parse_plan(raw: bytes | str) -> Plan:
    from dd_slurm.plan.converter import structure_plan
    from dd_slurm.plan.strict_json import loads_strict

    return structure_plan(loads_strict(raw, PlanError))


def plan_to_data(plan: Plan) -> dict[str, Any]:
    from dd_slurm.plan.converter import CONVERTER

    return CONVERTER.unstructure(plan)


def canonical_json(plan: Plan) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the bytes the digest covers."""
    return json.dumps(plan_to_data(plan), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def plan_digest(plan: Plan) -> str:
    return hashlib.sha256(canonical_json(plan)).hexdigest()
