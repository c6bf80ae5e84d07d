"""The gateway's configuration: frozen records, their JSON form (schema 1) and its strict reader.

The API key VALUE is never here: only the name of the environment variable that carries it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import urlsplit

import attrs

from dd_slurm.store import attempt_files as files

SCHEMA = 1
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
HOST = re.compile(r"[A-Za-z0-9._:\[\]-]{1,255}\Z")
TOP_KEYS = {"schema", "listen", "aliases", "queue_limit", "queue_timeout_s", "stall_timeout_s", "api_key_var",
            "state_path", "stats_path", "retry_after_s", "connect_timeout_s", "header_timeout_s", "idle_timeout_s",
            "max_connections", "eject_after", "routes_path", "replica_metrics"}


CONFIG_NAME, STATE_NAME, STATS_NAME = files.GATEWAY_CONFIG, files.GATEWAY_STATE, files.GATEWAY_STATS


class ConfigError(ValueError):
    """A config field is wrong; the message starts with its path."""


@attrs.frozen
class ReplicaTarget:
    deployment: str
    replica: int
    base_url: str  # http://host:port or http://host:port/v1
    max_inflight: int = 256
    expendable: bool = False  # its deployment may lose it (min_replicas < replicas): a stall takes it out, not the gateway down

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.base_url).port or 80

    @property
    def name(self) -> str:
        return f"{self.deployment}/{self.replica}"


@attrs.frozen
class GatewayConfig:
    aliases: dict[str, tuple[ReplicaTarget, ...]]
    state_path: str
    stats_path: str
    host: str = "127.0.0.1"
    port: int = 0
    queue_limit: int = 1024
    queue_timeout_s: float = 30.0
    stall_timeout_s: float | None = 300.0
    api_key_var: str | None = None
    retry_after_s: int = 1
    connect_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    max_connections: int = 4096
    eject_after: int = 3
    routes_path: str | None = None
    replica_metrics: bool = False  # read each replica's own /metrics (the attempt's gateway does)


def for_attempt(attempt_dir: str, models: dict[str, list[dict]], max_inflight: dict[str, int],
                gateway: Any = None, api_key_var: str | None = None, port: int = 0,
                expendable: frozenset[str] = frozenset()) -> GatewayConfig:
    """The attempt's gateway config. `models`: alias -> replicas as endpoints.json lists them
    ({deployment, replica, base_url}); `max_inflight`: per deployment name; `gateway`: the plan's
    gateway record (its queues, timeouts and connection cap) or None for the defaults;
    `expendable`: the deployments that may lose a replica and go on."""
    aliases = {alias: tuple(ReplicaTarget(r["deployment"], r["replica"], r["base_url"],
                                          max_inflight.get(r["deployment"], 256), r["deployment"] in expendable)
                            for r in replicas)
               for alias, replicas in models.items()}
    settings = {} if gateway is None else {"queue_limit": gateway.queue_limit,
                                           "queue_timeout_s": float(gateway.queue_timeout_s),
                                           "stall_timeout_s": gateway.stall_timeout_s,
                                           "header_timeout_s": float(gateway.header_timeout_s),
                                           "idle_timeout_s": float(gateway.idle_timeout_s),
                                           "max_connections": gateway.max_connections,
                                           "eject_after": gateway.eject_after}
    return GatewayConfig(aliases=aliases, state_path=f"{attempt_dir}/{STATE_NAME}",
                         stats_path=f"{attempt_dir}/{STATS_NAME}", port=port, api_key_var=api_key_var,
                         routes_path=f"{attempt_dir}/{files.GATEWAY_ROUTES}", replica_metrics=True, **settings)


@attrs.frozen(kw_only=True)
class Listen:
    """Where the gateway listens: the client's node and a port (0: one the kernel picks)."""

    host: str
    port: int


@attrs.frozen(kw_only=True)
class AliasSpec:
    """One model alias: the replicas its requests are spread over."""

    replicas: tuple[ReplicaTarget, ...]


@attrs.frozen(kw_only=True)
class ConfigFile:
    """The config file's shape (schema 1), structured by the one strict converter."""

    schema: int
    listen: Listen
    aliases: Mapping[str, AliasSpec]
    state_path: str
    stats_path: str
    queue_limit: int = 1024
    queue_timeout_s: float = 30.0
    stall_timeout_s: Optional[float] = 300.0
    api_key_var: Optional[str] = None
    retry_after_s: int = 1
    connect_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    max_connections: int = 4096
    eject_after: int = 3
    routes_path: Optional[str] = None
    replica_metrics: bool = False


def to_json(config: GatewayConfig) -> dict:
    """The config file's content (what `load` reads back)."""
    from dd_slurm.store.converter import CONVERTER

    settings = {name: getattr(config, name) for name in TOP_KEYS - {"schema", "listen", "aliases"}}
    return CONVERTER.unstructure(ConfigFile(
        schema=SCHEMA, listen=Listen(host=config.host, port=config.port),
        aliases={alias: AliasSpec(replicas=replicas) for alias, replicas in config.aliases.items()}, **settings))


def dump(config: GatewayConfig) -> bytes:
    return (json.dumps(to_json(config), indent=1, sort_keys=True) + "\n").encode()


def load(text: str) -> GatewayConfig:
    """Strict: unknown keys, wrong types and out-of-range values raise ConfigError naming the field."""
    from dd_slurm.gateway.config_hooks import structure_config

    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as err:
        raise ConfigError(f"not JSON ({err})") from None
    file = structure_config(data, ConfigFile)
    settings = {name: getattr(file, name) for name in TOP_KEYS - {"schema", "listen", "aliases"}}
    return GatewayConfig(aliases={alias: spec.replicas for alias, spec in file.aliases.items()},
                         host=file.listen.host, port=file.listen.port, **settings)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")
