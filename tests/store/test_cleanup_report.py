"""The cleanup report is one typed record: written with exactly the keys the README documents,
read back validated, and unchanged by the round trip whatever text processes and Slurm said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.bundle import entry
from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.cleanup_report import (
    Killed,
    Leftover,
    ProcessEnd,
    RemoteStep,
    ReportDraft,
    read_report,
    report_json,
    write_report,
)

ALWAYS = {"runs", "outcome", "reason", "processes", "leftovers_found", "leftovers_killed", "leftovers_after",
          "problems", "methods", "finished", "verdict"}
BUDGET = {"budget_s", "budget_basis"}


def _draft() -> ReportDraft:
    return ReportDraft(runs=1, outcome="failed", reason="client_failed", budget_s=27.5, budget_basis="job end unknown")


def _finished(draft: ReportDraft, note: str = "", problem: str = "", cmdline: str = "sleep 60") -> ReportDraft:
    draft.processes.append(ProcessEnd(name="client", how="stopped by SIGTERM (exit -15)", exit_code=-15, pid=41,
                                      node="n1", remote=RemoteStep(node="n1", pid=42, step_id="3")))
    draft.processes.append(ProcessEnd(name="preflight", how="exited 0 before cleanup", exit_code=0, pid=40, node="n1",
                                      remote=None))
    draft.leftovers_found.append(Leftover(pid=77, node="n2", start_time=123, role="", cmdline=cmdline,
                                          seen_by=("process_tree", "session")))
    draft.leftovers_killed.append(Killed(pid=77, node="n2"))
    draft.methods["n2"] = {"environment": "ran", "cgroup": "unavailable: no job_ path"}
    if note:
        draft.notes.append(note)
    if problem:
        draft.problems.append(problem)
    draft.seconds, draft.finished, draft.verdict = 1.25, True, "attention" if problem else "clean"
    return draft


@pytest.mark.parametrize(("case", "expected_keys"), [
    ("started", ALWAYS | BUDGET),
    ("finished", ALWAYS | BUDGET | {"seconds"}),
    ("finished with a note", ALWAYS | BUDGET | {"seconds", "notes"}),
])
def test_the_keys_on_disk(tmp_path, case: str, expected_keys: set[str]) -> None:
    """The report written when cleanup starts, and the one written when it ends (with and without
    notes), have exactly the keys cleanup.json has always had: no null `seconds`, no empty `notes`."""
    draft = _draft() if case == "started" else _finished(_draft(), note="grace cut" if "note" in case else "")
    write_report(tmp_path / files.CLEANUP, draft.freeze())
    assert expected_keys == set(json.loads((tmp_path / files.CLEANUP).read_text()))


def test_the_nested_values_on_disk(tmp_path) -> None:
    """Processes, leftovers and methods are written as the objects the README describes."""
    write_report(tmp_path / files.CLEANUP, _finished(_draft()).freeze())
    data = json.loads((tmp_path / files.CLEANUP).read_text())
    assert ({"name": "client", "how": "stopped by SIGTERM (exit -15)", "exit_code": -15, "pid": 41, "node": "n1",
             "remote": {"node": "n1", "pid": 42, "step_id": "3"}},
            None,
            [{"pid": 77, "node": "n2", "start_time": 123, "role": "", "cmdline": "sleep 60",
              "seen_by": ["process_tree", "session"]}],
            [{"pid": 77, "node": "n2"}],
            {"n2": {"environment": "ran", "cgroup": "unavailable: no job_ path"}}) == (
        data["processes"][0], data["processes"][1]["remote"], data["leftovers_found"], data["leftovers_killed"],
        data["methods"])


def test_the_refusal_report_of_entry_reads_back_unchanged(tmp_path) -> None:
    """entry.py writes its own report before anything of the bundle may be imported: the typed
    reader accepts it, and its JSON form is exactly what entry.py wrote (no budget keys appear)."""
    entry._record_refusal(str(tmp_path), "manifest.json: digest does not match")
    written = json.loads((tmp_path / files.CLEANUP).read_text())
    report = read_report(tmp_path / files.CLEANUP)
    assert (written, "clean") == (report_json(report), report.verdict)


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(note=TEXT, problem=TEXT, cmdline=TEXT)
def test_any_text_round_trips(tmp_path_factory, note: str, problem: str, cmdline: str) -> None:
    """Problems, notes and command lines quote what processes and Slurm said, control characters
    included: the report read back equals the report written."""
    path = tmp_path_factory.mktemp("report") / files.CLEANUP
    report = _finished(_draft(), note=note, problem=problem or "x", cmdline=cmdline).freeze()
    write_report(path, report)
    assert report == read_report(path)


@pytest.mark.parametrize(("change", "expected"), [
    ({"surplus": 1}, "surplus: unknown key"),
    ({"verdict": None}, "verdict: must be a string"),
    ({"runs": True}, "runs: must be an integer"),
    ({"leftovers_killed": [{"pid": "77", "node": "n2"}]}, "leftovers_killed[0].pid: must be an integer"),
    ({"methods": {"n2": "ran"}}, "methods: must be an object of objects"),
    ({"processes": [{"name": "client"}]}, "processes[0].how: required key is missing"),
])
def test_a_report_of_another_shape_is_refused_by_field(tmp_path, change: dict, expected: str) -> None:
    """Read back, a report that is not what cleanup writes is one AttemptDirError naming the file
    and the first wrong field."""
    data = {**report_json(_finished(_draft()).freeze()), **change}
    path: Path = tmp_path / files.CLEANUP
    path.write_text(json.dumps(data))
    with pytest.raises(AttemptDirError) as refused:
        read_report(path)
    assert f"{path}: not a cleanup report ({expected})" == str(refused.value)
