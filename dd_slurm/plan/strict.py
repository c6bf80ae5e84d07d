"""The project's one strict cattrs converter: exact scalar types, unknown keys rejected, errors as field
paths with a did-you-mean and what was typed. Plans (plan/converter.py) and persisted records
(store/converter.py) are read through it; it imports no record, so reading a stored record does not
import the plan's."""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Optional

import attrs
import cattrs
from cattrs.errors import AttributeValidationNote, ForbiddenExtraKeysError, IterableValidationNote

from dd_slurm.plan.fields import FieldError, did_you_mean
from dd_slurm.plan.strict_json import exact_scalar

CONVERTER = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)

def _scalar(kind: type) -> Any:
    return lambda value, _type: exact_scalar(value, kind)


for _kind in (int, float, str, bool):
    CONVERTER.register_structure_hook(_kind, _scalar(_kind))


def _is_tuple(type_: Any) -> bool:
    return typing.get_origin(type_) is tuple


def _structure_tuple(value: Any, type_: Any) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise FieldError("must be a list")
    (item_type, _ellipsis) = typing.get_args(type_)
    items = []
    for index, item in enumerate(value):
        try:
            items.append(CONVERTER.structure(item, item_type))
        except Exception as err:
            raise _Nested(f"[{index}]", err) from None
    return tuple(items)


def _is_str_dict(type_: Any) -> bool:
    return typing.get_origin(type_) is dict


def _structure_dict(value: Any, _type: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise FieldError("must be an object")
    for key, item in value.items():
        if type(item) is not str:
            raise FieldError("must be a string", f".{key}")
    return dict(value)


CONVERTER.register_structure_hook_func(_is_tuple, _structure_tuple)
CONVERTER.register_structure_hook_func(_is_str_dict, _structure_dict)


class _Nested(Exception):
    def __init__(self, prefix: str, inner: BaseException) -> None:
        super().__init__(prefix)
        self.prefix = prefix
        self.inner = inner


_ABSENT = object()


def value_at(data: Any, path: str) -> Any:
    """The value at a field path (`.job.nodes`, `.deployments[0].argv[2]`) of the raw plan, or _ABSENT."""
    for name, index in _STEP.findall(path):
        if name and isinstance(data, dict) and name in data:
            data = data[name]
        elif index and isinstance(data, list) and int(index) < len(data):
            data = data[int(index)]
        else:
            return _ABSENT
    return data


def with_value(reason: str, path: str, data: Any) -> str:
    """A type, range or format error with its unit (seconds, for a `_s` field) and what was typed:
    `must be a number of seconds (got "5s")`. Other reasons name what is wrong already; an `env`
    value is never shown."""
    value = value_at(data, path)
    if not reason.startswith("must ") or type(value) not in (str, int, float, bool) or ".env." in path:
        return reason  # only type, range and format errors; an environment value may be a secret
    if path.endswith("_s") and reason in ("must be a number", "must be an integer"):
        reason += " of seconds"
    import json

    shown = json.dumps(value)  # ASCII: a lone surrogate or control character is shown escaped
    return f"{reason} (got {shown[:60] + '...' if len(shown) > 60 else shown})"


MISSING = "required key is missing"
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def misspelt(data: Any, path: str) -> Optional[tuple[str, str]]:
    """For a required key reported missing: the key typed beside it that is close to its name,
    as the error to report instead (`job.time_limt: unknown key (did you mean time_limit?)`)."""
    steps = [(name, index) for name, index in _STEP.findall(path)]
    if not steps or not steps[-1][0]:
        return None
    parent: Any = data
    for name, index in steps[:-1]:
        parent = parent.get(name) if name and isinstance(parent, dict) else (
            parent[int(index)] if index and isinstance(parent, list) and int(index) < len(parent) else None)
    wanted = steps[-1][0]
    typed = [k for k in parent if isinstance(k, str) and k != wanted] if isinstance(parent, dict) else []
    close = difflib.get_close_matches(wanted, typed, n=1, cutoff=0.75)
    if not close:
        return None
    return f"{path[: len(path) - len(wanted) - 1]}.{close[0]}", f"unknown key (did you mean {wanted}?)"


def first_error(err: BaseException, path: str) -> tuple[str, str]:
    """The first leaf failure under `err`, as (field path, reason)."""
    if isinstance(err, _Nested):
        return first_error(err.inner, path + err.prefix)
    if isinstance(err, ForbiddenExtraKeysError):
        key = sorted(err.extra_fields)[0]
        return f"{path}.{key}", "unknown key" + did_you_mean(key, [f.name for f in attrs.fields(err.cl)])
    if isinstance(err, cattrs.BaseValidationError):
        return _first_in_group(err, path)
    if isinstance(err, FieldError):
        return path + err.subpath, err.reason
    if isinstance(err, KeyError):
        return path, MISSING
    return path, str(err) or type(err).__name__


def _first_in_group(group: cattrs.BaseValidationError, path: str) -> tuple[str, str]:
    sub = group.exceptions[0]
    for note in getattr(sub, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return first_error(sub, f"{path}.{note.name}")
        if isinstance(note, IterableValidationNote):
            return first_error(sub, f"{path}[{note.index}]")
    return first_error(sub, path)
