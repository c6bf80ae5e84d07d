"""The attempt-readiness record: one schema, one writer, monotonic transitions, atomic writes.

{"schema": 2, "attempt_id": str, "endpoints": "unpublished" | "published" | "withdrawn",
 "deployments": {replica name: {"state": S, "deployment": str, "replica": int, "model_alias": str,
                        "expected": int, "ready": [base_url], "nodes": [node], "port": int | null,
                        "base_url": str | null, "deadline": wall seconds | null,
                        "last_probe": {...} | null, "detail": str | null}}}
One entry per replica, keyed `<deployment>-<replica>`; `port` and `base_url` are null until an
automatic port is published at launch.
S moves pending -> starting -> ready -> stopped, or to failed from any live state; failed and
stopped are final. A replica its deployment may lose (min_replicas) moves starting or ready -> lost,
which cleanup leaves as it is (and a restart in place moves lost -> starting).
`endpoints` moves unpublished -> published -> withdrawn (or straight to withdrawn).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import attrs

from dd_slurm.errors import AttemptDirError, DdSlurmError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.converter import (
    CONVERTER,
    choice,
    free_text,
    json_object,
    mapping_of,
    read_record_file,
    register_record,
    structure_record,
)
from dd_slurm.store.readiness_shape import ENDPOINT_MOVES, FINAL, MOVES, SCHEMA

__all__ = ("ENDPOINT_MOVES", "FINAL", "MOVES", "SCHEMA", "Readiness", "ReadinessError", "ReadinessRecord",
           "ReplicaReadiness", "is_terminal", "probe_summary", "read_record", "readiness_json", "validate_record")

@attrs.frozen(kw_only=True)
class ReplicaReadiness:
    """One replica's entry. Records written before `nodes`, `model_alias`, `base_url` and
    `detail` were kept read with those absent."""

    state: str
    deployment: str
    replica: int
    expected: int
    ready: tuple[str, ...]
    deadline: Optional[float]
    last_probe: Optional[Mapping[str, Any]]
    port: Optional[int] = None
    nodes: tuple[str, ...] = ()
    model_alias: Optional[str] = None
    base_url: Optional[str] = None
    detail: Optional[str] = None


@attrs.frozen(kw_only=True)
class ReadinessRecord:
    schema: int
    endpoints: str
    deployments: Mapping[str, ReplicaReadiness]
    attempt_id: Optional[str] = None


def probe_summary(probe: Optional[Mapping[str, Any]]) -> Optional[str]:
    """A failed health probe in a few words (`HTTP 404 on /healthz: check health_path`,
    `connection refused`); None when there was none or it passed."""
    if not probe or probe.get("ok"):
        return None
    status, path = probe.get("status"), probe.get("path")
    if type(status) is int:
        where = f" on {path}" if isinstance(path, str) else ""
        return f"HTTP {status}{where}" + (": check health_path" if status == 404 else "")
    return str(probe.get("error") or "no answer")


def _optional(hook: Any) -> Any:
    return lambda value, kind: None if value is None else hook(value, kind)


register_record(ReplicaReadiness, state=choice(*MOVES), last_probe=_optional(json_object),
                detail=_optional(free_text))
register_record(ReadinessRecord, schema=choice(SCHEMA), endpoints=choice(*ENDPOINT_MOVES),
                deployments=mapping_of(ReplicaReadiness))


def readiness_json(record: ReadinessRecord) -> dict[str, Any]:
    """The record as readiness.json holds it."""
    return CONVERTER.unstructure(record)


def read_record(path: Path) -> Optional[ReadinessRecord]:
    """readiness.json validated, None when there is none; anything else is an AttemptDirError
    naming the file and the first wrong field."""
    return read_record_file(path, ReadinessRecord, "a readiness record")


class ReadinessError(DdSlurmError):
    """A transition the readiness schema does not allow (a bug in the caller)."""


class Readiness:
    def __init__(self, path: Path, record: dict[str, Any]) -> None:
        self.path, self.record = path, record
        self._held = 0  # inside batch(): writes wait for its end
        self._dirty = False

    @classmethod
    def new(cls, attempt_dir: Path, attempt_id: str, deployments: dict[str, dict[str, Any]]) -> Readiness:
        """The attempt's first readiness record, written: every replica pending, nothing published."""
        readiness = cls(Path(attempt_dir) / files.READINESS, {
            "schema": SCHEMA, "attempt_id": attempt_id, "endpoints": "unpublished",
            "deployments": {name: {"state": "pending", "expected": 1, "ready": [], "deadline": None,
                                   "last_probe": None, "detail": None, **info}
                            for name, info in deployments.items()},
        })
        readiness._write()
        return readiness

    @classmethod
    def left_by_earlier_run(cls, attempt_dir: Path) -> Optional[Readiness]:
        """The record an earlier supervisor of this attempt wrote (a resumed attempt's cleanup
        finishes it); None when there is none. A record that does not validate raises."""
        path = Path(attempt_dir) / files.READINESS
        record = read_record(path)
        return None if record is None else cls(path, readiness_json(record))

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Changes made inside are written once, at the end (also when it raises): one write of
        the record per readiness round, not one per replica."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held and self._dirty:
                self._write()

    def move(self, name: str, state: str, detail: Optional[str] = None, **fields: Any) -> None:
        dep = self.record["deployments"][name]
        if state != dep["state"]:
            if state not in MOVES[dep["state"]]:
                raise ReadinessError(f"readiness: {name} cannot go from {dep['state']} to {state}")
            dep["state"] = state
        if detail is not None:
            dep["detail"] = detail
        dep.update(fields)
        self._write()

    def note_probe(self, name: str, probe: dict[str, Any]) -> None:
        """Probe evidence is recorded without a state change (written only when it differs)."""
        dep = self.record["deployments"][name]
        if dep["last_probe"] is None or {k: v for k, v in dep["last_probe"].items() if k != "time"} != \
                {k: v for k, v in probe.items() if k != "time"}:
            dep["last_probe"] = probe
            self._write()

    def endpoints(self, state: str) -> None:
        current = self.record["endpoints"]
        if state != current:
            if state not in ENDPOINT_MOVES[current]:
                raise ReadinessError(f"readiness: endpoints cannot go from {current} to {state}")
            self.record["endpoints"] = state
            self._write()

    def finish(self) -> None:
        """Cleanup's last word: every deployment final, endpoints withdrawn (one write)."""
        with self.batch():
            for name, dep in self.record["deployments"].items():
                if dep["state"] not in FINAL:
                    self.move(name, "stopped")
            self.endpoints("withdrawn")

    def state(self, name: str) -> str:
        return self.record["deployments"][name]["state"]

    def last_probe(self, name: str) -> Optional[Mapping[str, Any]]:
        return self.record["deployments"][name]["last_probe"]

    def _write(self) -> None:
        if self._held:
            self._dirty = True
            return
        self._dirty = False
        write_json_atomic(self.path, readiness_json(CONVERTER.structure(self.record, ReadinessRecord)))


def is_terminal(record: dict[str, Any]) -> bool:
    return record.get("endpoints") == "withdrawn" and all(
        d.get("state") in FINAL for d in (record.get("deployments") or {}).values())


def validate_record(record: Any) -> list[str]:
    """Problems with a readiness record read from disk (empty when valid): the first wrong field."""
    try:
        structure_record(record, ReadinessRecord, files.READINESS, "a readiness record")
    except AttemptDirError as err:
        return [str(err)]
    return []
