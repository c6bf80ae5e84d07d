"""Record shapes as plain data, checked without attrs or cattrs: for the records a fresh `status`
process reads (attempt.json, readiness.json), where building the classes and their converter
functions would be half of its time.

A shape is a function from a JSON value to the record's JSON form (the converter's field hooks
are shapes too: their type argument is optional), as the project's strict
converter would structure and then unstructure it: the same exact scalar types, the same field
hooks, fields in declaration order with their defaults filled in, unknown keys refused after every
field has passed, and the same first error (`field.path: reason`). Each shape is held to its attrs
record and the converter by a hypothesis test (tests/store/test_shapes.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from dd_slurm.plan.fields import FieldError, did_you_mean
from dd_slurm.plan.strict_json import exact_scalar

Shape = Callable[[Any], Any]
REQUIRED = object()


class Invalid(ValueError):
    """A value that does not have the shape: `path` (`.observations[0].time`, or "" for the
    value itself) and the reason."""

    def __init__(self, path: str, reason: str, message: Optional[str] = None) -> None:
        super().__init__(message or f"{path.lstrip('.') or 'the record'}: {reason}")
        self.path = path
        self.reason = reason


def _at(prefix: str, err: Invalid | FieldError) -> Invalid:
    """`err`, raised checking the value at `prefix`, as an Invalid at its full path."""
    if isinstance(err, Invalid):
        return Invalid(prefix + err.path, err.reason)
    return Invalid(prefix + err.subpath, err.reason)


def scalar(kind: type) -> Shape:
    return lambda value: exact_scalar(value, kind)


def optional(shape: Shape) -> Shape:
    return lambda value: None if value is None else shape(value)


def items(shape: Shape) -> Shape:
    """A JSON list of `shape` (a tuple field)."""
    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise FieldError("must be a list")
        out: list[Any] = []
        try:
            for item in value:
                out.append(shape(item))
        except (Invalid, FieldError) as err:
            raise _at(f"[{len(out)}]", err) from None  # the item that failed: the first not in `out`
        return out

    return check


def mapping(shape: Shape) -> Shape:
    """A JSON object of `shape` by key (a mapping field)."""
    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise FieldError("must be an object")
        out, key = {}, ""
        try:
            for key, item in value.items():
                out[key] = shape(item)
        except (Invalid, FieldError) as err:
            raise _at(f".{key}", err) from None
        return out

    return check


def record(fields: Sequence[tuple[str, Shape, Any]], whole: Optional[Callable[[dict[str, Any]], None]] = None,
           omit_if_default: Sequence[str] = ()) -> Shape:
    """A JSON object of `fields` (name, shape, default or REQUIRED), in order; `whole` checks what
    holds across fields (raising FieldError); `omit_if_default` fields are left out of the JSON
    form while they hold their defaults."""
    names = [name for name, _shape, _default in fields]

    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise FieldError("must be an object")
        out, name = {}, ""
        try:
            for name, shape, default in fields:
                if name in value:
                    out[name] = shape(value[name])
                elif default is REQUIRED:
                    raise Invalid("", "required key is missing")
                else:
                    out[name] = default.copy() if isinstance(default, (list, dict)) else default
        except (Invalid, FieldError) as err:
            raise _at(f".{name}", err) from None
        extra = sorted(key for key in value if key not in out)
        if extra:
            raise Invalid(f".{extra[0]}", "unknown key" + did_you_mean(extra[0], names))
        if whole is not None:
            whole(out)
        for name, _shape, default in fields:
            if name in omit_if_default and out[name] == default:
                del out[name]
        return out

    return check


def checked(data: Any, shape: Shape) -> Any:
    """`data` in `shape`'s JSON form; Invalid naming the first wrong field otherwise (a value
    that is not an object: "a JSON object was expected", as the converter says it)."""
    if not isinstance(data, dict):
        raise Invalid("", "a JSON object was expected", "a JSON object was expected")
    try:
        return shape(data)
    except (Invalid, FieldError) as err:
        raise _at("", err) from None


def free_text(value: Any, _type: Any = str) -> str:
    """Any string: text that quotes what processes and Slurm said (control characters too)."""
    if type(value) is not str:
        raise FieldError("must be a string")
    return value


def json_object(value: Any, _type: Any = None) -> dict[str, Any]:
    """Any JSON object, kept as it is (evidence such as a probe's answer)."""
    if not isinstance(value, dict):
        raise FieldError("must be an object")
    return dict(value)


def choice(*allowed: Any) -> Callable[..., Any]:
    """A struct hook accepting exactly one of `allowed` (a schema number, a state word)."""
    def structure(value: Any, _type: Any = None) -> Any:
        if type(value) not in {type(a) for a in allowed} or value not in allowed:
            raise FieldError(f"must be {' or '.join(repr(a) for a in allowed)}")
        return value

    return structure
