"""Logical endpoints: model alias -> one logical URL and the replicas behind it, built from the
plan and the placement, and published as the endpoints record (store/endpoints.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from dd_slurm.plan.placement import Placed
from dd_slurm.plan.records import Plan
from dd_slurm.store.endpoints import SCHEMA, Endpoints, ModelEndpoint, ReplicaEndpoint, write_endpoints


def logical_url(alias: str, replicas: tuple[ReplicaEndpoint, ...], gateway_base: Optional[str] = None) -> Optional[str]:
    """The one URL the client is given for `alias`. With a gateway (its base URL, e.g.
    `http://127.0.0.1:PORT`), the gateway's per-alias path; without one, the first replica's own
    base URL. This is where the gateway plugs in."""
    if gateway_base is not None:
        return f"{gateway_base}/{alias}/v1"
    return next((r.base_url for r in replicas if r.base_url), None)


def endpoint_map(plan: Plan, placement: tuple[Placed, ...], base_urls: Mapping[str, Optional[str]], state: str,
                 gateway_base: Optional[str] = None, replica_states: Mapping[str, str] = {}) -> Endpoints:
    """`base_urls`: replica name -> its base URL (None while its port is unknown);
    `replica_states`: replica name -> serving, ejected or lost (absent: null, not serving yet)."""
    replicas: dict[str, list[ReplicaEndpoint]] = {}
    aliases = {d.name: d.model_alias for d in plan.deployments}
    for unit in placement:
        replicas.setdefault(aliases[unit.deployment], []).append(
            ReplicaEndpoint(deployment=unit.deployment, replica=unit.replica, base_url=base_urls.get(unit.name),
                            state=replica_states.get(unit.name)))
    models = {alias: ModelEndpoint(url=logical_url(alias, tuple(listed), gateway_base), replicas=tuple(listed))
              for alias, listed in replicas.items()}
    return Endpoints(schema=SCHEMA, state=state, models=models)


def publish(path: Path, endpoints: Endpoints) -> None:
    write_endpoints(path, endpoints)
