"""The cleanup report (`cleanup.json`, see the README's "Reading a cleanup report"): one frozen
record, written only by `write_report` (atomic, unstructured by the project's cattrs converter)
and read back validated by `read_report`.

The JSON keys are the record's fields. `budget_s`, `budget_basis`, `seconds` and `notes` appear
only when there is something to say: the report written when cleanup starts has no `seconds`, and
the refusal report of bundle/entry.py (which cannot import this module) has no budget. Free text
(problems, notes, methods, a leftover's command line and role) is any text: it quotes what
processes and Slurm said.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from dd_slurm.plan.fields import FieldError
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.converter import CONVERTER, free_text, read_record_file


@attrs.frozen(kw_only=True)
class RemoteStep:
    """What the on-node launcher recorded for a step: where it ran, its pid, its Slurm step id."""

    node: Optional[str]
    pid: Optional[int]
    step_id: Optional[str]


@attrs.frozen(kw_only=True)
class ProcessEnd:
    """A process this supervisor started, and how it ended."""

    name: str
    how: str
    exit_code: Optional[int]
    pid: int
    node: str
    remote: Optional[RemoteStep]


@attrs.frozen(kw_only=True)
class Leftover:
    """A process of the attempt the leftover scan found on `node`, and which methods saw it."""

    pid: int
    node: str
    start_time: int
    role: str
    cmdline: str
    seen_by: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Killed:
    """A leftover process cleanup killed, by pid and node."""

    pid: int
    node: str


@attrs.frozen(kw_only=True)
class CleanupReport:
    runs: int
    outcome: str
    reason: str
    processes: tuple[ProcessEnd, ...]
    leftovers_found: tuple[Leftover, ...]
    leftovers_killed: tuple[Killed, ...]
    leftovers_after: tuple[Leftover, ...]
    problems: tuple[str, ...]
    methods: Mapping[str, Mapping[str, str]]  # node -> method -> what it did
    finished: bool
    verdict: str  # unfinished, clean or attention
    budget_s: Optional[float] = None
    budget_basis: Optional[str] = None
    notes: tuple[str, ...] = ()
    seconds: Optional[float] = None


def _texts(value: Any, _type: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FieldError("must be a list")
    for index, item in enumerate(value):
        if type(item) is not str:
            raise FieldError("must be a string", f"[{index}]")
    return tuple(value)


def _methods(value: Any, _type: Any) -> dict[str, dict[str, str]]:
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise FieldError("must be an object of objects")
    for node, methods in value.items():
        for name, what in methods.items():
            if type(what) is not str:
                raise FieldError("must be a string", f".{node}.{name}")
    return {node: dict(methods) for node, methods in value.items()}


CONVERTER.register_structure_hook(CleanupReport, make_dict_structure_fn(
    CleanupReport, CONVERTER, problems=override(struct_hook=_texts), notes=override(struct_hook=_texts),
    methods=override(struct_hook=_methods)))
CONVERTER.register_structure_hook(Leftover, make_dict_structure_fn(
    Leftover, CONVERTER, role=override(struct_hook=free_text), cmdline=override(struct_hook=free_text)))
CONVERTER.register_unstructure_hook(CleanupReport, make_dict_unstructure_fn(  # absent rather than null or empty
    CleanupReport, CONVERTER, budget_s=override(omit_if_default=True), budget_basis=override(omit_if_default=True),
    notes=override(omit_if_default=True), seconds=override(omit_if_default=True)))


def report_json(report: CleanupReport) -> dict[str, Any]:
    """The report as cleanup.json holds it."""
    return CONVERTER.unstructure(report)


def write_report(path: Path, report: CleanupReport) -> None:
    """The one writer of cleanup.json: the whole report, atomically."""
    write_json_atomic(path, report_json(report))


def read_report(path: Path) -> Optional[CleanupReport]:
    """cleanup.json as cleanup (or entry.py's refusal) writes it, None when there is none; anything
    else is an AttemptDirError naming the file and the first field that is wrong."""
    return read_record_file(path, CleanupReport, "a cleanup report")


@attrs.define(kw_only=True)
class ReportDraft:
    """The report while cleanup runs: its steps (some in threads of their own) add to it, and
    `freeze()` is what is written and returned."""

    runs: int
    outcome: str
    reason: str
    budget_s: float
    budget_basis: str
    processes: list[ProcessEnd] = attrs.Factory(list)
    leftovers_found: list[Leftover] = attrs.Factory(list)
    leftovers_killed: list[Killed] = attrs.Factory(list)
    leftovers_after: list[Leftover] = attrs.Factory(list)
    problems: list[str] = attrs.Factory(list)
    methods: dict[str, Mapping[str, str]] = attrs.Factory(dict)
    notes: list[str] = attrs.Factory(list)
    finished: bool = False
    verdict: str = "unfinished"
    seconds: Optional[float] = None

    def freeze(self) -> CleanupReport:
        return CleanupReport(
            runs=self.runs, outcome=self.outcome, reason=self.reason, processes=tuple(self.processes),
            leftovers_found=tuple(self.leftovers_found), leftovers_killed=tuple(self.leftovers_killed),
            leftovers_after=tuple(self.leftovers_after), problems=tuple(self.problems), methods=dict(self.methods),
            finished=self.finished, verdict=self.verdict, budget_s=self.budget_s, budget_basis=self.budget_basis,
            notes=tuple(self.notes), seconds=self.seconds)
