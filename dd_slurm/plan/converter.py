"""The one cattrs converter for plans: strict types, unknown keys rejected, errors as field paths."""

from __future__ import annotations

import typing
from typing import Any

import cattrs
from cattrs.errors import AttributeValidationNote, ForbiddenExtraKeysError, IterableValidationNote

from dd_slurm.errors import PlanError
from dd_slurm.plan.fields import FieldError, check_text
from dd_slurm.plan.records import Plan
from dd_slurm.plan.strict_json import number_problem

CONVERTER = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)

_JSON_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _scalar(kind: type) -> Any:
    def structure(value: Any, _type: Any) -> Any:
        bad = number_problem(value)
        if bad and kind in (int, float):
            raise FieldError(bad)
        ok = type(value) is kind or (kind is float and type(value) is int)
        if not ok:
            raise FieldError(f"must be {_JSON_NAMES[kind]}")
        if kind is str:
            check_text(value)
        return float(value) if kind is float else value

    return structure


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


def structure_plan(data: Any) -> Any:
    if not isinstance(data, dict):
        raise PlanError("", "the plan must be a JSON object")
    try:
        return CONVERTER.structure(data, Plan)
    except Exception as err:
        path, reason = first_error(err, "")
        raise PlanError(path.lstrip("."), reason) from None


def first_error(err: BaseException, path: str) -> tuple[str, str]:
    """The first leaf failure under `err`, as (field path, reason)."""
    if isinstance(err, _Nested):
        return first_error(err.inner, path + err.prefix)
    if isinstance(err, ForbiddenExtraKeysError):
        return f"{path}.{sorted(err.extra_fields)[0]}", "unknown key"
    if isinstance(err, cattrs.BaseValidationError):
        return _first_in_group(err, path)
    if isinstance(err, FieldError):
        return path + err.subpath, err.reason
    if isinstance(err, KeyError):
        return path, "required key is missing"
    return path, str(err) or type(err).__name__


def _first_in_group(group: cattrs.BaseValidationError, path: str) -> tuple[str, str]:
    sub = group.exceptions[0]
    for note in getattr(sub, "__notes__", ()):
        if isinstance(note, AttributeValidationNote):
            return first_error(sub, f"{path}.{note.name}")
        if isinstance(note, IterableValidationNote):
            return first_error(sub, f"{path}[{note.index}]")
    return first_error(sub, path)
