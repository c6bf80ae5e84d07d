"""The gateway's configuration: frozen records, their JSON form (schema 1) and its strict reader.

The API key VALUE is never here: only the name of the environment variable that carries it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any
from urllib.parse import urlsplit

import attrs

from dd_slurm.store import attempt_files as files

SCHEMA = 1
IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
HOST = re.compile(r"[A-Za-z0-9._:\[\]-]{1,255}\Z")
TOP_KEYS = {"schema", "listen", "aliases", "queue_limit", "queue_timeout_s", "stall_timeout_s", "api_key_var",
            "state_path", "stats_path", "retry_after_s", "connect_timeout_s", "header_timeout_s", "idle_timeout_s",
            "max_connections"}


CONFIG_NAME, STATE_NAME, STATS_NAME = files.GATEWAY_CONFIG, files.GATEWAY_STATE, files.GATEWAY_STATS


class ConfigError(ValueError):
    """A config field is wrong; the message starts with its path."""


@attrs.frozen
class ReplicaTarget:
    deployment: str
    replica: int
    base_url: str  # http://host:port or http://host:port/v1
    max_inflight: int = 256

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


def for_attempt(attempt_dir: str, models: dict[str, list[dict]], max_inflight: dict[str, int],
                gateway: Any = None, api_key_var: str | None = None, port: int = 0) -> GatewayConfig:
    """The attempt's gateway config. `models`: alias -> replicas as endpoints.json lists them
    ({deployment, replica, base_url}); `max_inflight`: per deployment name; `gateway`: the plan's
    gateway record (its queues, timeouts and connection cap) or None for the defaults."""
    aliases = {alias: tuple(ReplicaTarget(r["deployment"], r["replica"], r["base_url"],
                                          max_inflight.get(r["deployment"], 256)) for r in replicas)
               for alias, replicas in models.items()}
    settings = {} if gateway is None else {"queue_limit": gateway.queue_limit,
                                           "queue_timeout_s": float(gateway.queue_timeout_s),
                                           "stall_timeout_s": gateway.stall_timeout_s,
                                           "header_timeout_s": float(gateway.header_timeout_s),
                                           "idle_timeout_s": float(gateway.idle_timeout_s),
                                           "max_connections": gateway.max_connections}
    return GatewayConfig(aliases=aliases, state_path=f"{attempt_dir}/{STATE_NAME}",
                         stats_path=f"{attempt_dir}/{STATS_NAME}", port=port, api_key_var=api_key_var, **settings)


def to_json(config: GatewayConfig) -> dict:
    """The config file's content (what `load` reads back)."""
    return {
        "schema": SCHEMA, "listen": {"host": config.host, "port": config.port},
        "aliases": {alias: {"replicas": [attrs.asdict(r) for r in replicas]}
                    for alias, replicas in config.aliases.items()},
        "queue_limit": config.queue_limit, "queue_timeout_s": config.queue_timeout_s,
        "stall_timeout_s": config.stall_timeout_s, "api_key_var": config.api_key_var,
        "state_path": config.state_path, "stats_path": config.stats_path,
        "retry_after_s": config.retry_after_s, "connect_timeout_s": config.connect_timeout_s,
        "header_timeout_s": config.header_timeout_s, "idle_timeout_s": config.idle_timeout_s,
        "max_connections": config.max_connections,
    }


def dump(config: GatewayConfig) -> bytes:
    return (json.dumps(to_json(config), indent=1, sort_keys=True) + "\n").encode()


def load(text: str) -> GatewayConfig:
    """Strict: unknown keys, wrong types and out-of-range values raise ConfigError."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as err:
        raise ConfigError(f"not JSON ({err})") from None
    _object(data, "", TOP_KEYS, {"schema", "listen", "aliases", "state_path", "stats_path"})
    if data["schema"] != SCHEMA:
        raise ConfigError(f"schema: must be {SCHEMA}")
    listen = _object(data["listen"], "listen", {"host", "port"}, {"host", "port"})
    return GatewayConfig(
        aliases=_aliases(data["aliases"]), state_path=_text(data["state_path"], "state_path"),
        stats_path=_text(data["stats_path"], "stats_path"), host=_host(listen["host"], "listen.host"),
        port=_int(listen["port"], "listen.port", 0, 65535),
        queue_limit=_int(data.get("queue_limit", 1024), "queue_limit", 0),
        queue_timeout_s=_number(data.get("queue_timeout_s", 30.0), "queue_timeout_s"),
        stall_timeout_s=_optional_number(data.get("stall_timeout_s", 300.0), "stall_timeout_s"),
        api_key_var=_env_name(data.get("api_key_var"), "api_key_var"),
        retry_after_s=_int(data.get("retry_after_s", 1), "retry_after_s", 0),
        connect_timeout_s=_number(data.get("connect_timeout_s", 10.0), "connect_timeout_s"),
        header_timeout_s=_number(data.get("header_timeout_s", 10.0), "header_timeout_s"),
        idle_timeout_s=_number(data.get("idle_timeout_s", 120.0), "idle_timeout_s"),
        max_connections=_int(data.get("max_connections", 4096), "max_connections", 1),
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _object(value: Any, path: str, allowed: set[str], required: set[str]) -> dict:
    where = f"{path}: " if path else ""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}must be an object")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigError(f"{path + '.' if path else ''}{unknown[0]}: unknown key")
    missing = sorted(required - set(value))
    if missing:
        raise ConfigError(f"{path + '.' if path else ''}{missing[0]}: required")
    return value


def _aliases(value: Any) -> dict[str, tuple[ReplicaTarget, ...]]:
    if not isinstance(value, dict) or not value:
        raise ConfigError("aliases: must be a non-empty object")
    out = {}
    for alias, spec in value.items():
        if not IDENTIFIER.match(alias):
            raise ConfigError(f"aliases.{alias[:64]}: not an identifier")
        spec = _object(spec, f"aliases.{alias}", {"replicas"}, {"replicas"})
        replicas = spec["replicas"]
        if not isinstance(replicas, list) or not replicas:
            raise ConfigError(f"aliases.{alias}.replicas: must be a non-empty list")
        out[alias] = tuple(_replica(r, f"aliases.{alias}.replicas[{i}]") for i, r in enumerate(replicas))
    return out


def _replica(value: Any, path: str) -> ReplicaTarget:
    value = _object(value, path, {"deployment", "replica", "base_url", "max_inflight"},
                    {"deployment", "replica", "base_url"})
    url = _text(value["base_url"], f"{path}.base_url")
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or not port or parts.path not in ("", "/", "/v1", "/v1/") \
            or parts.query or parts.fragment or parts.username:
        raise ConfigError(f"{path}.base_url: must be http://HOST:PORT or http://HOST:PORT/v1")
    deployment = _text(value["deployment"], f"{path}.deployment")
    if not IDENTIFIER.match(deployment):
        raise ConfigError(f"{path}.deployment: not an identifier")
    return ReplicaTarget(deployment, _int(value["replica"], f"{path}.replica", 0), url,
                         _int(value.get("max_inflight", 256), f"{path}.max_inflight", 1))


def _int(value: Any, path: str, low: int, high: int | None = None) -> int:
    if type(value) is not int or value < low or (high is not None and value > high):
        raise ConfigError(f"{path}: must be an integer >= {low}" + (f" and <= {high}" if high is not None else ""))
    return value


def _number(value: Any, path: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{path}: must be a finite number > 0")
    return float(value)


def _optional_number(value: Any, path: str) -> float | None:
    return None if value is None else _number(value, path)


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise ConfigError(f"{path}: must be a non-empty string without control characters")
    return value


def _host(value: Any, path: str) -> str:
    if not isinstance(value, str) or not HOST.match(value):
        raise ConfigError(f"{path}: must be a host name or address")
    return value


def _env_name(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not ENV_NAME.match(value):
        raise ConfigError(f"{path}: must be an environment variable name or null")
    return value
