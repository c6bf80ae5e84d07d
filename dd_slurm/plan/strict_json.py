"""Strict JSON for inputs: duplicate keys, NaN/Infinity, overflowing or absurdly long numbers and
deep nesting are errors with a field path, never a silently different value or a traceback."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from dd_slurm.plan.fields import FieldError, check_text

MAX_NUMBER_CHARS = 40
MAX_DEPTH = 64


class BadNumber:
    """A number literal that cannot be a finite value; the structure hooks reject it by field."""

    def __init__(self, text: str) -> None:
        self.text = text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"


class _Duplicates(dict):
    duplicate: str = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            dup = _Duplicates(out)
            dup.duplicate = key
            return dup
        out[key] = value
    return out


def _float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) and len(text) <= MAX_NUMBER_CHARS else BadNumber(text)


def _int(text: str) -> Any:
    return int(text) if len(text) <= MAX_NUMBER_CHARS else BadNumber(text)


def loads_strict(raw: bytes | str, error: Callable[[str, str], Exception]) -> Any:
    """Parse `raw`; `error(path, reason)` builds the exception raised for a bad document."""
    try:
        data = json.loads(raw, object_pairs_hook=_pairs, parse_float=_float, parse_int=_int,
                          parse_constant=BadNumber)
    except RecursionError:
        raise error("", "not valid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise error("", f"not valid JSON: {err}") from None
    found = _first_problem(data, "", 0)
    if found:
        raise error(*found)
    return data


def _first_problem(value: Any, path: str, depth: int) -> tuple[str, str] | None:
    if depth > MAX_DEPTH:
        return path.lstrip("."), f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, _Duplicates):
        return path.lstrip("."), f"duplicate key {value.duplicate!r}"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_problem(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]", depth + 1)
        if found:
            return found
    return None


def number_problem(value: Any) -> str | None:
    """The reason a structured number is refused, or None."""
    if isinstance(value, BadNumber):
        return f"{value.text} is not a finite number in range"
    return None


JSON_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def exact_scalar(value: object, kind: type) -> object:
    """`value` as a `kind` read from strict JSON: exactly that type (an integer is a number too,
    returned as a float), a finite number in range, text without control characters."""
    bad = number_problem(value)
    if bad and kind in (int, float):
        raise FieldError(bad)
    if not (type(value) is kind or (kind is float and type(value) is int)):
        raise FieldError(f"must be {JSON_NAMES[kind]}")
    if kind is str:
        check_text(value)  # type: ignore[arg-type]
    return float(value) if kind is float else value  # type: ignore[arg-type]
