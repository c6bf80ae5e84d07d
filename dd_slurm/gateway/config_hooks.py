"""How the one strict converter reads a gateway config file: each field's check, as struct hooks
that name what is wrong (config.py holds the records)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from dd_slurm.gateway.config import (
    ENV_NAME,
    HOST,
    IDENTIFIER,
    SCHEMA,
    AliasSpec,
    ConfigError,
    ConfigFile,
    Listen,
    ReplicaTarget,
)
from dd_slurm.plan.fields import FieldError
from dd_slurm.store.converter import CONVERTER, RecordInvalid, choice, mapping_of, register_record, structure_checked

Hook = Callable[[Any, Any], Any]


def integer(low: int, high: int | None = None) -> Hook:
    def structure(value: Any, _type: Any) -> int:
        if type(value) is not int or value < low or (high is not None and value > high):
            raise FieldError(f"must be an integer >= {low}" + (f" and <= {high}" if high is not None else ""))
        return value

    return structure


def positive(value: Any, _type: Any) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise FieldError("must be a finite number > 0")
    return float(value)


def text(value: Any, _type: Any) -> str:
    if not isinstance(value, str) or not value or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        raise FieldError("must be a non-empty string without control characters")
    return value


def matching(pattern: Any, what: str, optional: bool = False) -> Hook:
    def structure(value: Any, _type: Any) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not pattern.match(value):
            raise FieldError(f"must be {what}")
        return value

    return structure


def base_url(value: Any, _type: Any) -> str:
    url = text(value, str)
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or not port or parts.path not in ("", "/", "/v1", "/v1/") \
            or parts.query or parts.fragment or parts.username:
        raise FieldError("must be http://HOST:PORT or http://HOST:PORT/v1")
    return url


def aliases(value: Any, kind: Any) -> Any:
    if not isinstance(value, dict) or not value:
        raise FieldError("must be a non-empty object")
    bad = next((alias for alias in value if not IDENTIFIER.match(alias)), None)
    if bad is not None:
        raise FieldError("not an identifier", f".{bad[:64]}")
    return mapping_of(AliasSpec)(value, kind)


def _replicas(value: Any, kind: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise FieldError("must be a non-empty list")
    return CONVERTER.structure(value, kind)


def boolean(value: Any, _type: Any) -> bool:
    if type(value) is not bool:
        raise FieldError("must be true or false")
    return value


register_record(ReplicaTarget, deployment=matching(IDENTIFIER, "an identifier"), replica=integer(0),
                base_url=base_url, max_inflight=integer(1), expendable=boolean)
register_record(AliasSpec, replicas=_replicas)
register_record(Listen, host=matching(HOST, "a host name or address"), port=integer(0, 65535))
register_record(ConfigFile, schema=choice(SCHEMA), aliases=aliases, state_path=text, stats_path=text,
                queue_limit=integer(0), queue_timeout_s=positive,
                stall_timeout_s=lambda v, t: None if v is None else positive(v, t),
                api_key_var=matching(ENV_NAME, "an environment variable name or null", optional=True),
                retry_after_s=integer(0), connect_timeout_s=positive, header_timeout_s=positive,
                idle_timeout_s=positive, max_connections=integer(1), eject_after=integer(1),
                routes_path=lambda v, t: None if v is None else text(v, t), replica_metrics=boolean)


def structure_config(data: Any, kind: type[ConfigFile]) -> ConfigFile:
    """`data` as the config file's record; ConfigError naming the first wrong field otherwise."""
    try:
        return structure_checked(data, kind)
    except RecordInvalid as err:
        raise ConfigError(str(err)) from None
