"""The small checks the plan's fields are validated with; each raises FieldError with a reason."""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from dd_slurm.plan import fields

SCHEMA_VERSION = 1
# Sane upper bounds: no allocation is larger, and a typo like 1e6 GPUs fails here, not in the queue.
MAX_NODES = 65536  # Slurm's hostlist cap
MAX_GPUS_PER_NODE = 64
MAX_CPUS_PER_TASK = 4096
MAX_REPLICAS = 4096
MAX_INFLIGHT = 1_000_000
MAX_QUEUE = 10_000_000
MAX_ARRAY = 1_000_000
MAX_SIGNAL_S = 65535
MAX_SECONDS = 366 * 24 * 3600.0


def v(check: Callable[[Any], None]) -> Callable[[Any, attrs.Attribute, Any], None]:
    """Wrap a plain check as an attrs validator whose errors name the attribute."""

    def validator(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        try:
            check(value)
        except fields.FieldError as err:
            raise fields.FieldError(err.reason, f".{attribute.name}{err.subpath}") from None

    return validator


def opt(check: Callable[[Any], None]) -> Callable[[Any], None]:
    return lambda value: None if value is None else check(value)


def between(low: float, high: float, strict_low: bool = False, not_yet: str = "") -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not math.isfinite(value):
            raise fields.FieldError("must be a finite number")
        if value < low or (strict_low and value == low):
            raise fields.FieldError(f"must be {'greater than' if strict_low else 'at least'} {low:g}")
        if value > high and not_yet:
            raise fields.FieldError(f"{value:g} is not supported yet by this dd-slurm ({not_yet}); leave it {high:g}")
        if value > high:
            raise fields.FieldError(f"must be at most {high:g}")

    return check


def supported_version(value: int) -> None:
    if value != SCHEMA_VERSION:
        raise fields.FieldError(f"unsupported version {value}; this dd-slurm reads version {SCHEMA_VERSION}")


def not_yet(what: str) -> Callable[[Any], None]:
    """A contract key this dd-slurm does not implement yet: accepted only as null, so a plan that
    asks for it is refused, never silently run without it."""

    def check(value: Any) -> None:
        if value is not None:
            raise fields.FieldError(f"not supported yet by this dd-slurm ({what}); leave it null")

    return check


def one_of(choices: tuple[Any, ...]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in choices:
            raise fields.FieldError(f"must be one of {', '.join(json.dumps(c) for c in choices)}")

    return check


def non_empty(values: tuple[Any, ...]) -> None:
    if not values:
        raise fields.FieldError("must have at least one element")


def identifier(value: str) -> None:
    fields.check_name_text(value)
    if not fields.IDENTIFIER.match(value):
        raise fields.FieldError("must match [A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def port(value: int) -> None:
    if not 1024 <= value <= 65535:
        raise fields.FieldError("must be between 1024 and 65535")


def time_limit(value: str) -> None:
    fields.check_scheduler_value(value)
    fields.time_limit_seconds(value)


def mem(value: str) -> None:
    fields.check_scheduler_value(value)
    if not fields.MEM.match(value):
        raise fields.FieldError('must be a positive integer with an optional K, M, G or T suffix, like "16G"')


def health_path(value: str) -> None:
    fields.check_text(value)
    if not value.isascii() or not value.isprintable():
        raise fields.FieldError("must be printable ASCII")
    if not value.startswith("/") or any(c in value for c in " ?#"):
        raise fields.FieldError('must be an absolute URL path like "/health"')


def relative_path(value: str) -> None:
    fields.check_text(value)
    parts = value.split("/")
    if not value or value.startswith("/") or ".." in parts or posixpath.normpath(value) in (".", ""):
        raise fields.FieldError("must be a relative path inside the results dir (no '..')")


def result_path(value: str) -> None:
    """A relative path inside the results dir, with at most this shard's placeholders
    (`part-{shard_index}.jsonl`)."""
    relative_path(value)
    fields.check_argv_item(value, fields.RESULT_PLACEHOLDERS)


def absolute_path(value: str) -> None:
    fields.check_text(value)
    if not value.startswith("/"):
        raise fields.FieldError("must be an absolute path")


def local_dir(value: str) -> None:
    """An absolute directory on each node; `{node}` stands for the node's name."""
    absolute_path(value)
    fields.check_argv_item(value, fields.LOCAL_DIR_PLACEHOLDERS)


_IMAGE_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:#@+-]{0,254}")  # docker://..., nvcr.io#nvidia/vllm:tag
_SHA256 = re.compile(r"[0-9a-f]{64}")


def image(value: str) -> None:
    """A squashfs image file (absolute path) or a registry reference pyxis imports; either travels
    inside one srun option, so no ','."""
    fields.check_text(value)
    if "," in value:
        raise fields.FieldError("must not contain ',' (srun --container-image takes one value)")
    if not value.startswith("/") and (value.startswith(".") or value.endswith((".sqsh", ".squashfs"))):
        raise fields.FieldError("an image file must be given by its absolute path")
    if not value.startswith("/") and not _IMAGE_REFERENCE.fullmatch(value):
        raise fields.FieldError("must be an absolute path of a squashfs image or a registry reference "
                                "(docker://REGISTRY/IMAGE:TAG, REGISTRY#IMAGE:TAG)")


def sha256_hex(value: str) -> None:
    if not _SHA256.fullmatch(value):
        raise fields.FieldError("must be a sha256 digest: 64 lowercase hex digits")


def container_mount(value: str) -> None:
    """`SRC:DST` or `SRC:DST:ro`, both absolute (no ',': srun --container-mounts separates with it)."""
    fields.check_text(value)
    parts = value.split(":")
    if "," in value or len(parts) not in (2, 3) or not all(p.startswith("/") for p in parts[:2]) or \
            parts[2:] not in ([], ["ro"]):
        raise fields.FieldError('must be "SRC:DST" or "SRC:DST:ro" with absolute paths and no ","')


def argv(allowed: frozenset[str]) -> Callable[[Any], None]:
    def check(values: tuple[str, ...]) -> None:
        if not values:
            raise fields.FieldError("must have at least one element")
        if not values[0]:
            raise fields.FieldError("the program must not be empty", "[0]")
        fields.each(lambda item: fields.check_argv_item(item, allowed))(values)

    return check


def env_set(values: Mapping[str, str]) -> None:
    for name, value in values.items():
        try:
            env_name(name)
            fields.check_text(value)
        except fields.FieldError as err:
            raise fields.FieldError(err.reason, f".{name}") from None


def env_name(name: str) -> None:
    fields.check_name_text(name)
    if not fields.ENV_NAME.match(name):
        raise fields.FieldError("must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*; what was typed is "
                                "not shown: it may be a value)")
    if name.startswith("DD_SLURM_"):
        raise fields.FieldError(f"{name!r} is reserved: DD_SLURM_* variables are set by the runtime")


def passed_name(name: str) -> None:
    """A name whose value the runtime passes on from an environment (forward, api_key_var)."""
    env_name(name)
    reserved = next((p for p in fields.FORWARD_RESERVED_PREFIXES if name.startswith(p)), None)
    if reserved:
        raise fields.FieldError(f"{name!r} cannot be passed on: {reserved}* variables are read by Slurm, "
                           "the runtime or the loader")


def text(value: str) -> None:
    fields.check_text(value)
    if not value:
        raise fields.FieldError("must not be empty")


sched = opt(fields.check_scheduler_value)


_SHELL_VARIABLE = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


def plan_warnings(plan: Any) -> list[str]:
    """What `validate` and `submit` say of a valid plan on stderr: argv and stop timing."""
    return argv_warnings(plan) + stop_warnings(plan)


def stop_warnings(plan: Any) -> list[str]:
    """The stop (drain, the client's grace, cleanup's grace) must fit in the pre-timeout signal's
    lead, or cleanup cuts it short."""
    lead = plan.job.pre_timeout_signal_s
    need = plan.gateway.drain_s + plan.client.stop_grace_s + plan.runtime.cleanup_grace_s
    if not lead or need < lead:
        return []
    return [f"warning: job.pre_timeout_signal_s: {lead} s does not hold the stop: gateway.drain_s "
            f"{plan.gateway.drain_s:g} + client.stop_grace_s {plan.client.stop_grace_s:g} + runtime.cleanup_grace_s "
            f"{plan.runtime.cleanup_grace_s:g} = {need:g} s; cleanup will cut them short"]


def argv_warnings(plan: Any) -> list[str]:
    """What a valid plan may not mean: `$VAR` in an argument is passed as written (no shell
    expands it). One line per argument, naming its field."""
    lists = [("client.argv", plan.client.argv), ("client.preflight_argv", plan.client.preflight_argv or ())]
    for index, dep in enumerate(plan.deployments):
        lists += [(f"deployments[{index}].argv", dep.argv), (f"deployments[{index}].follower_argv",
                                                              dep.follower_argv or ())]
    return [f"warning: {field}[{i}]: {found.group()} is passed as written: no shell expands it (set the value in "
            "env.set or env.forward and let the program read it, or run the program through `bash -c`)"
            for field, argv in lists if not _shell_command(argv)
            for i, item in enumerate(argv) if (found := _SHELL_VARIABLE.search(item.replace("{{", "{").replace("}}", "}")))]


def _shell_command(argv: Any) -> bool:
    """`bash -lc '...'` and the like: the shell does expand what it is given."""
    return bool(argv) and posixpath.basename(argv[0]) in ("sh", "bash", "dash", "zsh", "ksh") and any(
        a.startswith("-") and not a.startswith("--") and "c" in a for a in argv[1:])
