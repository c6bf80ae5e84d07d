"""The endpoints file (`endpoints.json`, schema 2): model alias -> one logical URL and the
replicas behind it, published atomically (mode 0644: the client reads it).

{"schema": 2, "state": "planned" | "ready" | "withdrawn",
 "models": {ALIAS: {"url": str | null, "replicas": [{"deployment", "replica", "base_url", "state"}]}}}

A replica's `state` is serving, ejected, restarting or lost once the gateway routes to it, null
before; rewritten whenever it changes.

While `planned` (before launch, for the preflight) a replica whose port is chosen at launch has
`base_url` null, and `url` is null until it can be known.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.converter import CONVERTER, choice, mapping_of, read_record_file, register_record

SCHEMA = 2
STATES = ("planned", "ready", "withdrawn")
REPLICA_STATES = ("serving", "ejected", "restarting", "lost")


@attrs.frozen(kw_only=True)
class ReplicaEndpoint:
    """One replica behind an alias: its deployment, index and own base URL (null until known)."""

    deployment: str
    replica: int
    base_url: Optional[str]
    state: Optional[str] = None


@attrs.frozen(kw_only=True)
class ModelEndpoint:
    """One model alias: its logical URL (the gateway's) and its replicas."""

    url: Optional[str]
    replicas: tuple[ReplicaEndpoint, ...]


@attrs.frozen(kw_only=True)
class Endpoints:
    schema: int
    state: str
    models: Mapping[str, ModelEndpoint]


register_record(ReplicaEndpoint, state=lambda v, t: None if v is None else choice(*REPLICA_STATES)(v, t))
register_record(ModelEndpoint)
register_record(Endpoints, schema=choice(SCHEMA), state=choice(*STATES), models=mapping_of(ModelEndpoint))


def endpoints_json(endpoints: Endpoints) -> dict[str, Any]:
    """The record as endpoints.json holds it."""
    return CONVERTER.unstructure(endpoints)


def write_endpoints(path: Path, endpoints: Endpoints) -> None:
    """The one writer of endpoints.json: the whole map, atomically, readable by the client."""
    write_json_atomic(path, endpoints_json(endpoints), mode=0o644)


def read_endpoints(path: Path) -> Optional[Endpoints]:
    """endpoints.json validated, None when none is published; anything else is an AttemptDirError
    naming the file and the first wrong field."""
    return read_record_file(path, Endpoints, "an endpoints file")
