"""Logical endpoints: model alias -> base URL(s), published atomically to the endpoints file."""

from __future__ import annotations

from pathlib import Path

from dd_slurm.plan import Plan
from dd_slurm.runtime.placement import Placed
from dd_slurm.store.atomic import write_json_atomic

ENDPOINTS_NAME = "endpoints.json"


def endpoint_map(plan: Plan, placement: dict[str, Placed], state: str) -> dict:
    """`state` is "planned" (before readiness, for the preflight) or "ready"."""
    models: dict[str, dict] = {}
    for dep in plan.deployments:
        entry = models.setdefault(dep.model_alias, {"base_urls": [], "deployments": []})
        entry["base_urls"].append(f"http://{placement[dep.name].leader}:{dep.port}/v1")
        entry["deployments"].append(dep.name)
    return {"schema": 1, "state": state, "models": models}


def publish(path: Path, endpoints: dict) -> None:
    write_json_atomic(path, endpoints, mode=0o644)
