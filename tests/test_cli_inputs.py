"""No input makes any command print a traceback: damaged attempt files, odd paths and ids,
unusable workspaces. One `error:` line, exit 2, and what is on disk is unchanged."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.console import main  # the console script, as a user runs it
from tests.runtime.harness import plan_data, stage_plan

DEEP = "[" * 100_000 + "]" * 100_000
HUGE = "9" * 5000


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """One staged attempt (submitted as job 1000, journal at client, a cleanup report), copied per case."""
    root = tmp_path_factory.mktemp("cli-inputs")
    attempt = stage_plan(root, plan_data()).attempt_dir
    record = json.loads((attempt / "attempt.json").read_text())
    record.update(job_id="1000", submitted_at=1_700_000_000.0)
    (attempt / "attempt.json").write_text(json.dumps(record))
    (attempt / "journal.jsonl").write_text(json.dumps({"kind": "transition", "from": "staged", "to": "verified",
                                                       "trigger": "verify", "seq": 0, "ts": 1.0, "time": "t"}) + "\n")
    (attempt / "cleanup.json").write_text(json.dumps({  # a whole report: inspect reads it back as its typed record
        "verdict": "clean", "runs": 1, "outcome": "succeeded", "reason": "ok", "processes": [], "problems": [],
        "leftovers_found": [], "leftovers_killed": [], "leftovers_after": [], "methods": {}, "finished": True}))
    return attempt


@pytest.fixture(scope="module", autouse=True)
def no_slurm(tmp_path_factory):
    """Any command that did reach Slurm finds no tools (exit 3): nothing here may touch a cluster."""
    previous = os.environ.get("DD_SLURM_BIN_DIR")
    os.environ["DD_SLURM_BIN_DIR"] = str(tmp_path_factory.mktemp("no-tools"))
    yield
    if previous is None:
        os.environ.pop("DD_SLURM_BIN_DIR")
    else:
        os.environ["DD_SLURM_BIN_DIR"] = previous


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_one_error(code: int, err: str, expected: int = 2) -> None:
    assert "Traceback" not in err
    assert (expected, 1, True) == (code, len(err.splitlines()), err.startswith("error: ")), err


def copy_of(template: Path, tmp: Path) -> Path:
    target = tmp / template.name
    shutil.copytree(template, target, symlinks=True)
    return target


CORRUPT = {
    "truncated": lambda text: text[: len(text) // 2],
    "not-json": lambda text: "this is not JSON\n",
    "empty": lambda text: "",
    "a-list": lambda text: "[1, 2, 3]\n",
    "lone-surrogate": lambda text: text.replace('"1000"', '"\\ud800"') if '"1000"' in text else '{"x": "\\udfff"',
    "deeply-nested": lambda text: DEEP,
    "5000-digits": lambda text: '{"job_id": "1000", "submitted_at": ' + HUGE + "}",
    "binary": lambda text: "\udcff\x00\x01",
}
RECORD_SHAPES = {
    "job-id-option": {"job_id": "--all"},
    "job-id-number": {"job_id": 1000},
    "job-id-zero": {"job_id": "0"},
    "job-id-arabic": {"job_id": "\u0661\u0662"},
    "observations-text": {"observations": "many"},
    "observation-without-state": {"observations": [{"time": 1.0}]},
    "submitted-at-text": {"submitted_at": "yesterday"},
    "submitted-at-nan": {"submitted_at": float("nan")},
    "deadline-negative": {"reconcile_deadline_s": -5},
    "cancel-requests-dict": {"cancel_requests": {"a": 1}},
}
JOURNAL_LINES = {
    "unknown-state": {"kind": "transition", "from": "staged", "to": "exploding", "trigger": "x"},
    "unknown-kind": {"kind": "party", "from": "staged", "to": "verified", "trigger": "x"},
    "unknown-outcome": {"kind": "transition", "from": "cleanup", "to": "done", "trigger": "x", "outcome": "meh"},
    "a-number": 5,
}


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("command", ["status", "cancel", "inspect"])
@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_a_damaged_attempt_record(template, tmp_path, command: str, kind: str) -> None:
    """attempt.json truncated, not JSON, of the wrong shape, with a lone surrogate, nested
    100,000 deep, holding a 5000-digit number: one error line, exit 2, file unchanged."""
    attempt = copy_of(template, tmp_path)
    path = attempt / "attempt.json"
    _write(path, CORRUPT[kind](path.read_text()))
    before = path.read_bytes()
    code, _out, err = cli(command, str(attempt))
    if command == "inspect" and kind == "lone-surrogate":  # inspect shows the record; a surrogate is data
        assert "Traceback" not in err and code in (0, 2)
    else:
        assert_one_error(code, err)
    assert before == path.read_bytes()


@pytest.mark.parametrize("command", ["status", "cancel"])
@pytest.mark.parametrize("kind", sorted(RECORD_SHAPES))
def test_record_values_are_validated_before_use(template, tmp_path, command: str, kind: str) -> None:
    """A job_id of `--all` (or any value that is not a job id), times that are not numbers, lists
    that are not lists: exit 2 naming the field; no Slurm tool is reached."""
    attempt = copy_of(template, tmp_path)
    path = attempt / "attempt.json"
    record = json.loads(path.read_text())
    record.update(RECORD_SHAPES[kind])
    path.write_text(json.dumps(record))
    code, _out, err = cli(command, str(attempt))
    assert_one_error(code, err)
    assert "attempt.json" in err


@pytest.mark.parametrize("command", ["status", "inspect"])
@pytest.mark.parametrize("kind", sorted(CORRUPT) + sorted(JOURNAL_LINES))
def test_a_damaged_journal(template, tmp_path, command: str, kind: str) -> None:
    """journal.jsonl truncated, not JSON, with unknown states, kinds or outcomes: exit 2."""
    attempt = copy_of(template, tmp_path)
    path = attempt / "journal.jsonl"
    text = CORRUPT[kind](path.read_text()) if kind in CORRUPT else json.dumps(JOURNAL_LINES[kind]) + "\n"
    if kind in ("empty",):
        pytest.skip("an empty journal is a staged attempt")
    _write(path, text)
    code, _out, err = cli(command, str(attempt))
    assert_one_error(code, err)


@pytest.mark.parametrize("kind", ["truncated", "not-json", "a-list", "deeply-nested", "5000-digits", "processes-text",
                                  "problems-numbers", "runs-text"])
def test_a_damaged_cleanup_report(template, tmp_path, kind: str) -> None:
    """cleanup.json damaged or of the wrong shape: inspect says so in one line, exit 2."""
    attempt = copy_of(template, tmp_path)
    path = attempt / "cleanup.json"
    shapes = {"processes-text": '{"processes": "x"}', "problems-numbers": '{"problems": [1, 2]}',
              "runs-text": '{"runs": "twice"}'}
    _write(path, shapes[kind] if kind in shapes else CORRUPT[kind](path.read_text()))
    code, _out, err = cli("inspect", str(attempt))
    assert_one_error(code, err)


@pytest.mark.parametrize("workspace", ["file", "under-a-file", "read-only"])
@pytest.mark.parametrize("command", ["stage", "submit"])
def test_unusable_workspaces(tmp_path, command: str, workspace: str) -> None:
    """A workspace that is a file, lies under a file, or cannot be written: one line, exit 2."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_data()))
    (tmp_path / "a-file").write_text("x")
    path = {"file": tmp_path / "a-file", "under-a-file": tmp_path / "a-file" / "ws",
            "read-only": Path("/proc/self/ws")}[workspace]
    code, _out, err = cli(command, str(plan), "-w", str(path))
    assert_one_error(code, err)
    assert "x" == (tmp_path / "a-file").read_text()


@settings(max_examples=60)
@given(st.binary(max_size=300) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_as_attempt_record(template, tmp_path_factory, data: bytes) -> None:
    """Whatever bytes attempt.json holds: no traceback; unless they are a JSON object, exit 2
    with one error line and the file unchanged."""
    attempt = copy_of(template, tmp_path_factory.mktemp("b"))
    (attempt / "attempt.json").write_bytes(data)
    code, _out, err = cli("status", "--json", str(attempt))
    assert "Traceback" not in err
    try:
        is_object = isinstance(json.loads(data), dict)
    except (ValueError, RecursionError):
        is_object = False
    if not is_object:
        assert_one_error(code, err)
    assert data == (attempt / "attempt.json").read_bytes()


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                           max_leaves=12)


@settings(max_examples=60)
@given(st.dictionaries(st.sampled_from(["job_id", "submitted_at", "last_seen", "observations", "cancel_requests",
                                        "reconcile_deadline_s"]), json_values, min_size=1))
def test_any_json_fields_in_the_record(template, tmp_path_factory, fields: dict) -> None:
    """Any JSON values in the record's own fields: status and cancel end in 0, 2 or 3 (a valid
    record reaching the missing tools), always with one error line when not 0."""
    attempt = copy_of(template, tmp_path_factory.mktemp("j"))
    record = json.loads((attempt / "attempt.json").read_text())
    record.update(fields)
    (attempt / "attempt.json").write_text(json.dumps(record))
    for command in ("status", "cancel"):
        code, _out, err = cli(command, str(attempt))
        assert "Traceback" not in err
        if code:
            assert_one_error(code, err, code)
            assert code in (2, 3)


@settings(max_examples=80)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=3))
def test_any_query_ids(ids: list[str]) -> None:
    """`query` with any text: a malformed id is exit 2 naming it; well-formed ones reach the
    (missing) tools, exit 3; one line either way."""
    from dd_slurm.store.record_fields import JOB_ID

    code, _out, err = cli("query", *ids)
    valid = all(JOB_ID.match(i) for i in ids if not i.startswith("-"))
    if any(i.startswith("-") for i in ids):
        assert "Traceback" not in err and code in (0, 2)
    else:
        assert_one_error(code, err, 3 if valid else 2)


@settings(max_examples=60)
@given(st.sampled_from(["status", "cancel", "inspect", "logs"]), st.text(min_size=1, max_size=40))
def test_any_attempt_path(command: str, path: str) -> None:
    """Any text as an attempt dir: exit 2 with one error line (or a usage error)."""
    code, _out, err = cli(command, path)
    assert "Traceback" not in err
    assert code == 2 and err.startswith("error: ")


@pytest.mark.parametrize("command", ["status", "inspect"])
@pytest.mark.parametrize("content", ['{"deployments": 5}', '{"deployments": {"a": 5}}', '{"endpoints": []}',
                                     '{"schema": 1, "deployments": {"a": {"state": []}}}', "[]", DEEP, "{"])
def test_a_damaged_readiness_record(template, tmp_path, command: str, content: str) -> None:
    """readiness.json of the wrong shape (or not JSON): one error line, exit 2."""
    attempt = copy_of(template, tmp_path)
    (attempt / "readiness.json").write_text(content)
    code, _out, err = cli(command, str(attempt))
    assert_one_error(code, err)
