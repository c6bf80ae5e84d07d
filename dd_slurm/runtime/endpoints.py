"""Logical endpoints: model alias -> one logical URL and the replicas behind it, published
atomically to the endpoints file (schema 2):

{"schema": 2, "state": "planned" | "ready" | "withdrawn",
 "models": {ALIAS: {"url": str | null, "replicas": [{"deployment", "replica", "base_url"}]}}}

While `planned` (before launch, for the preflight) a replica whose port is chosen at launch has
`base_url` null, and `url` is null until it can be known.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from dd_slurm.plan.placement import Placed
from dd_slurm.plan.records import Plan
from dd_slurm.store.atomic import write_json_atomic

SCHEMA = 2


def logical_url(alias: str, replicas: list[dict], gateway_base: Optional[str] = None) -> Optional[str]:
    """The one URL the client is given for `alias`. With a gateway (its base URL, e.g.
    `http://127.0.0.1:PORT`), the gateway's per-alias path; without one, the first replica's own
    base URL. This is where the gateway plugs in."""
    if gateway_base is not None:
        return f"{gateway_base}/{alias}/v1"
    return next((r["base_url"] for r in replicas if r["base_url"]), None)


def endpoint_map(plan: Plan, placement: tuple[Placed, ...], base_urls: Mapping[str, Optional[str]], state: str,
                 gateway_base: Optional[str] = None) -> dict:
    """`base_urls`: replica name -> its base URL (None while its port is unknown)."""
    models: dict[str, dict] = {}
    aliases = {d.name: d.model_alias for d in plan.deployments}
    for unit in placement:
        entry = models.setdefault(aliases[unit.deployment], {"url": None, "replicas": []})
        entry["replicas"].append({"deployment": unit.deployment, "replica": unit.replica,
                                  "base_url": base_urls.get(unit.name)})
    for alias, entry in models.items():
        entry["url"] = logical_url(alias, entry["replicas"], gateway_base)
    return {"schema": SCHEMA, "state": state, "models": models}


def publish(path: Path, endpoints: dict) -> None:
    write_json_atomic(path, endpoints, mode=0o644)
