"""readiness.json as plain data (store/shapes), for the processes that only read it: a fresh
`status` checks it without building the runtime's attrs record (store/readiness, which writes it).
tests/store/test_shapes.py holds this shape to that record: the same values, the same first error."""

from __future__ import annotations

from typing import Any

from dd_slurm.errors import AttemptDirError
from dd_slurm.store.record_fields import FLOAT, INT, TEXT
from dd_slurm.store.shapes import REQUIRED, Invalid, checked, choice, free_text, items, json_object, mapping, optional, record

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

REPLICA = record([
    ("state", choice(*MOVES), REQUIRED), ("deployment", TEXT, REQUIRED), ("replica", INT, REQUIRED),
    ("expected", INT, REQUIRED), ("ready", items(TEXT), REQUIRED), ("deadline", optional(FLOAT), REQUIRED),
    ("last_probe", optional(json_object), REQUIRED), ("port", optional(INT), None), ("nodes", items(TEXT), []),
    ("model_alias", optional(TEXT), None), ("base_url", optional(TEXT), None),
    ("detail", optional(free_text), None)])
READINESS = record([("schema", choice(SCHEMA), REQUIRED), ("endpoints", choice(*ENDPOINT_MOVES), REQUIRED),
                    ("deployments", mapping(REPLICA), REQUIRED), ("attempt_id", optional(TEXT), None)])


def checked_readiness(data: Any, where: str) -> dict[str, Any]:
    """`data` in its JSON form, every field checked; an AttemptDirError naming `where` and the
    first wrong field otherwise."""
    try:
        return checked(data, READINESS)
    except Invalid as err:
        raise AttemptDirError(f"{where}: not a readiness record ({err})") from None
