"""Persisted records through the project's one strict converter: structure with field paths,
read a record file, and the hooks the records' shapes need (mappings keyed by name)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TypeVar

from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from dd_slurm.errors import AttemptDirError
from dd_slurm.plan.fields import FieldError
from dd_slurm.plan.strict import CONVERTER, _Nested, first_error
from dd_slurm.store.shapes import choice, free_text, json_object

__all__ = ("CONVERTER", "RecordInvalid", "choice", "first_error", "free_text", "json_object", "mapping_of",
           "read_record_file", "register_omitting", "register_record", "structure_checked", "structure_record")

R = TypeVar("R")


class RecordInvalid(ValueError):
    """A record's content is wrong; the message is `field: reason`."""


def structure_checked(data: Any, kind: type[R]) -> R:
    """`data` as a `kind`; RecordInvalid naming the first wrong field otherwise."""
    if not isinstance(data, dict):
        raise RecordInvalid("a JSON object was expected")
    try:
        return CONVERTER.structure(data, kind)
    except Exception as err:
        field, reason = first_error(err, "")
        raise RecordInvalid(f"{field.lstrip('.') or 'the record'}: {reason}") from None


def structure_record(data: Any, kind: type[R], where: str, what: str) -> R:
    """`data` as a `kind`; anything else is an AttemptDirError naming `where` and the first wrong field."""
    try:
        return structure_checked(data, kind)
    except RecordInvalid as err:
        raise AttemptDirError(f"{where}: not {what} ({err})") from None


def read_record_file(path: Path, kind: type[R], what: str) -> Optional[R]:
    """The record in `path`, None when there is none; unreadable or invalid content is an
    AttemptDirError naming the file (and the field)."""
    from dd_slurm.store.view import read_json

    data = read_json(path)
    return None if data is None else structure_record(data, kind, str(path), what)


def register_record(kind: type, whole: Optional[Callable[[Any], None]] = None,
                    **hooks: Callable[[Any, Any], Any]) -> None:
    """Structure `kind` from a JSON object only (anything else: "must be an object"), its fields
    named in `hooks` by those struct hooks; `whole`, when given, checks what holds across fields
    of the structured record (raising FieldError). The field-by-field function is generated on the
    first record of that kind: a fresh `status` process pays only for the kinds it reads."""
    generated: list[Callable[[Any, Any], Any]] = []

    def fields(value: dict[str, Any]) -> Any:
        if not generated:
            overrides: dict[str, Any] = {name: override(struct_hook=hook) for name, hook in hooks.items()}
            generated.append(make_dict_structure_fn(kind, CONVERTER, **overrides))
        return generated[0](value, kind)

    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, dict):
            raise FieldError("must be an object")
        record = fields(value)
        if whole is not None:
            whole(record)
        return record

    CONVERTER.register_structure_hook(kind, structure)


def register_omitting(kind: type, *names: str) -> None:
    """Unstructure `kind` leaving out the fields `names` while they hold their defaults; the
    function is generated on the first record of that kind written."""
    generated: list[Callable[[Any], dict[str, Any]]] = []

    def unstructure(record: Any) -> dict[str, Any]:
        if not generated:
            overrides: dict[str, Any] = {name: override(omit_if_default=True) for name in names}
            generated.append(make_dict_unstructure_fn(kind, CONVERTER, **overrides))
        return generated[0](record)

    CONVERTER.register_unstructure_hook(kind, unstructure)


def mapping_of(item: Any) -> Callable[[Any, Any], dict[str, Any]]:
    """A struct hook for `Mapping[str, item]`: every value structured, errors at `.key`."""
    def structure(value: Any, _type: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise FieldError("must be an object")
        out = {}
        for key, entry in value.items():
            try:
                out[key] = CONVERTER.structure(entry, item)
            except Exception as err:
                raise _Nested(f".{key}", err) from None
        return out

    return structure
