"""readiness.json as plain data (store/shapes), for the processes that only read it: a fresh
`status` checks it without building the runtime's attrs record (store/readiness, which writes it).
tests/store/test_shapes.py holds this shape to that record: the same values, the same first error."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from dd_slurm.errors import AttemptDirError
from dd_slurm.store.shapes import (
    REQUIRED,
    Invalid,
    checked,
    choice,
    free_text,
    items,
    json_object,
    mapping,
    optional,
    record,
    scalar,
)

SCHEMA = 2
MOVES = {
    "pending": {"starting", "failed", "stopped"},
    "starting": {"ready", "failed", "stopped", "lost"},
    "ready": {"failed", "stopped", "lost"},
    "lost": {"starting"},
    "failed": set(),
    "stopped": set(),
}
ENDPOINT_MOVES = {"unpublished": {"published", "withdrawn"}, "published": {"withdrawn"}, "withdrawn": set()}
FINAL = {"failed", "stopped", "lost"}

_TEXT, _INT = scalar(str), scalar(int)
REPLICA = record([
    ("state", choice(*MOVES), REQUIRED), ("deployment", _TEXT, REQUIRED), ("replica", _INT, REQUIRED),
    ("expected", _INT, REQUIRED), ("ready", items(_TEXT), REQUIRED), ("deadline", optional(scalar(float)), REQUIRED),
    ("last_probe", optional(json_object), REQUIRED), ("port", optional(_INT), None), ("nodes", items(_TEXT), []),
    ("model_alias", optional(_TEXT), None), ("base_url", optional(_TEXT), None),
    ("detail", optional(free_text), None)])
READINESS = record([("schema", choice(SCHEMA), REQUIRED), ("endpoints", choice(*ENDPOINT_MOVES), REQUIRED),
                    ("deployments", mapping(REPLICA), REQUIRED), ("attempt_id", optional(_TEXT), None)])


def checked_readiness(data: Any, where: str) -> dict[str, Any]:
    try:
        return checked(data, READINESS)
    except Invalid as err:
        raise AttemptDirError(f"{where}: not a readiness record ({err})") from None


def read_readiness(path: Path) -> Optional[dict[str, Any]]:
    """readiness.json checked, in its JSON form; None when there is none; anything else is an
    AttemptDirError naming the file and the first wrong field."""
    from dd_slurm.store.view import read_json

    data = read_json(path)
    return None if data is None else checked_readiness(data, str(path))
