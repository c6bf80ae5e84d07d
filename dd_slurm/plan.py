"""The resolved plan v1: frozen attrs records, one strict cattrs converter, canonical JSON, digest."""

from __future__ import annotations

import hashlib
import json
import posixpath
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import attrs

from dd_slurm import fields as F
from dd_slurm.errors import PlanError

SCHEMA_VERSION = 1
RESULT_FORMATS = ("jsonl", "json", "parquet", "file")


def _v(check: Callable[[Any], None]) -> Callable[[Any, attrs.Attribute, Any], None]:
    """Wrap a plain check as an attrs validator whose errors name the attribute."""

    def validator(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        try:
            check(value)
        except F.FieldError as err:
            raise F.FieldError(err.reason, f".{attribute.name}{err.subpath}") from None

    return validator


def _opt(check: Callable[[Any], None]) -> Callable[[Any], None]:
    return lambda value: None if value is None else check(value)


def _at_least(low: float, strict: bool = False) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < low or (strict and value == low):
            raise F.FieldError(f"must be {'greater than' if strict else 'at least'} {low}")

    return check


def _supported_version(value: int) -> None:
    if value != SCHEMA_VERSION:
        raise F.FieldError(f"unsupported version {value}; this dd-slurm reads version {SCHEMA_VERSION}")


def _one_of(value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise F.FieldError(f"must be one of {', '.join(json.dumps(c) for c in choices)}")


def _non_empty(values: tuple[Any, ...]) -> None:
    if not values:
        raise F.FieldError("must have at least one element")


def _identifier(value: str) -> None:
    F.check_text(value)
    if not F.IDENTIFIER.match(value):
        raise F.FieldError("must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _port(value: int) -> None:
    if not 1024 <= value <= 65535:
        raise F.FieldError("must be between 1024 and 65535")


def _time_limit(value: str) -> None:
    F.check_scheduler_value(value)
    F.time_limit_seconds(value)


def _mem(value: str) -> None:
    F.check_scheduler_value(value)
    if not F.MEM.match(value):
        raise F.FieldError('must be a positive integer with an optional K, M, G or T suffix, like "16G"')


def _health_path(value: str) -> None:
    F.check_text(value)
    if not value.startswith("/") or any(c in value for c in " ?#"):
        raise F.FieldError('must be an absolute URL path like "/health"')


def _relative_path(value: str) -> None:
    F.check_text(value)
    parts = value.split("/")
    if not value or value.startswith("/") or ".." in parts or posixpath.normpath(value) in (".", ""):
        raise F.FieldError("must be a relative path inside the results dir (no '..')")


def _absolute_path(value: str) -> None:
    F.check_text(value)
    if not value.startswith("/"):
        raise F.FieldError("must be an absolute path")


def _argv(allowed: frozenset[str]) -> Callable[[Any], None]:
    def check(values: tuple[str, ...]) -> None:
        if not values:
            raise F.FieldError("must have at least one element")
        F.each(lambda item: F.check_argv_item(item, allowed))(values)

    return check


def _env_set(values: Mapping[str, str]) -> None:
    for name, value in values.items():
        try:
            _env_name(name)
            F.check_text(value)
        except F.FieldError as err:
            raise F.FieldError(err.reason, f".{name}") from None


def _env_name(name: str) -> None:
    F.check_text(name)
    if not F.ENV_NAME.match(name):
        raise F.FieldError(f"{name!r} is not a valid environment variable name")
    if name.startswith("DD_SLURM_"):
        raise F.FieldError(f"{name!r} is reserved: DD_SLURM_* variables are set by the runtime")


_sched = _opt(F.check_scheduler_value)


@attrs.frozen
class Env:
    set: dict[str, str] = attrs.field(factory=dict, validator=_v(_env_set))
    forward: tuple[str, ...] = attrs.field(default=(), validator=_v(F.each(_env_name)))


@attrs.frozen
class Job:
    time_limit: str = attrs.field(validator=_v(_time_limit))
    nodes: int = attrs.field(default=1, validator=_v(_at_least(1)))
    gpus_per_node: int = attrs.field(default=0, validator=_v(_at_least(0)))
    cpus_per_task: int = attrs.field(default=1, validator=_v(_at_least(1)))
    mem: Optional[str] = attrs.field(default=None, validator=_v(_opt(_mem)))
    exclusive: bool = False
    pre_timeout_signal_s: int = attrs.field(default=0, validator=_v(_at_least(0)))
    partition: Optional[str] = attrs.field(default=None, validator=_v(_sched))
    account: Optional[str] = attrs.field(default=None, validator=_v(_sched))
    qos: Optional[str] = attrs.field(default=None, validator=_v(_sched))
    reservation: Optional[str] = attrs.field(default=None, validator=_v(_sched))
    constraint: Optional[str] = attrs.field(default=None, validator=_v(_sched))
    comment: Optional[str] = attrs.field(default=None, validator=_v(_sched))

    def __attrs_post_init__(self) -> None:
        if self.pre_timeout_signal_s >= F.time_limit_seconds(self.time_limit):
            raise F.FieldError("must be shorter than time_limit", ".pre_timeout_signal_s")


@attrs.frozen
class Deployment:
    name: str = attrs.field(validator=_v(_identifier))
    model_alias: str = attrs.field(validator=_v(_identifier))
    port: int = attrs.field(validator=_v(_port))
    argv: tuple[str, ...] = attrs.field(validator=_v(_argv(F.DEPLOYMENT_PLACEHOLDERS)))
    nodes: int = attrs.field(default=1, validator=_v(_at_least(1)))
    gpus_per_node: int = attrs.field(default=0, validator=_v(_at_least(0)))
    follower_argv: Optional[tuple[str, ...]] = attrs.field(
        default=None, validator=_v(_opt(_argv(F.DEPLOYMENT_PLACEHOLDERS)))
    )
    health_path: str = attrs.field(default="/health", validator=_v(_health_path))
    ready_timeout_s: float = attrs.field(default=600.0, validator=_v(_at_least(0, strict=True)))
    env: Env = attrs.field(factory=Env)

    def __attrs_post_init__(self) -> None:
        if self.nodes > 1 and self.follower_argv is None:
            raise F.FieldError("required when nodes > 1", ".follower_argv")
        if self.nodes == 1 and self.follower_argv is not None:
            raise F.FieldError("only allowed when nodes > 1", ".follower_argv")


@attrs.frozen
class Result:
    path: str = attrs.field(validator=_v(_relative_path))
    format: str = attrs.field(validator=_v(lambda v: _one_of(v, RESULT_FORMATS)))
    min_records: int = attrs.field(default=0, validator=_v(_at_least(0)))


@attrs.frozen
class Client:
    argv: tuple[str, ...] = attrs.field(validator=_v(_argv(F.CLIENT_PLACEHOLDERS)))
    result: Result
    preflight_argv: Optional[tuple[str, ...]] = attrs.field(
        default=None, validator=_v(_opt(_argv(F.CLIENT_PLACEHOLDERS)))
    )
    env: Env = attrs.field(factory=Env)
    timeout_s: Optional[float] = attrs.field(default=None, validator=_v(_opt(_at_least(0, strict=True))))


@attrs.frozen
class Runtime:
    python: str = attrs.field(validator=_v(_absolute_path))
    cleanup_grace_s: float = attrs.field(default=10.0, validator=_v(_at_least(0)))
    reconcile_deadline_s: float = attrs.field(default=300.0, validator=_v(_at_least(0, strict=True)))


@attrs.frozen
class Plan:
    schema_version: int = attrs.field(validator=_v(_supported_version))
    name: str = attrs.field(validator=_v(_identifier))
    job: Job
    deployments: tuple[Deployment, ...] = attrs.field(validator=_v(lambda v: _non_empty(v)))
    client: Client
    runtime: Runtime

    def __attrs_post_init__(self) -> None:
        seen: dict[str, int] = {}
        for index, dep in enumerate(self.deployments):
            where = f".deployments[{index}]"
            if dep.name in seen:
                raise F.FieldError(f"duplicate deployment name {dep.name!r}", f"{where}.name")
            seen[dep.name] = index
            if dep.nodes > self.job.nodes:
                raise F.FieldError(f"needs {dep.nodes} nodes but job.nodes is {self.job.nodes}", f"{where}.nodes")
            if dep.gpus_per_node > self.job.gpus_per_node:
                raise F.FieldError(
                    f"needs {dep.gpus_per_node} GPUs per node but job.gpus_per_node is {self.job.gpus_per_node}",
                    f"{where}.gpus_per_node",
                )


def load_plan(path: Path) -> Plan:
    """Read and validate a plan file; every failure is a PlanError naming the field."""
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise PlanError("", f"cannot read plan {path}: {err.strerror}") from None
    return parse_plan(raw)


def parse_plan(raw: bytes | str) -> Plan:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise PlanError("", f"not valid JSON: {err}") from None
    from dd_slurm.plan_converter import structure_plan

    return structure_plan(data)


def plan_to_data(plan: Plan) -> dict[str, Any]:
    from dd_slurm.plan_converter import CONVERTER

    return CONVERTER.unstructure(plan)


def canonical_json(plan: Plan) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the bytes the digest covers."""
    return json.dumps(plan_to_data(plan), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def plan_digest(plan: Plan) -> str:
    return hashlib.sha256(canonical_json(plan)).hexdigest()
