"""The one-pass parse of plain squeue/sacct output (the raw-id formats dd-slurm requests) agrees
with the line-by-line parse, row for row and error for error, on lines near and across the edge of
what counts as plain."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import OutputError
from dd_slurm.scheduler import parse

# Each column's plain values, then values the one-pass parse must not take as plain (each parsed
# line by line instead: a row or an OutputError).
JOBS = (["1", "7", "999999999", "12"], ["1000000000", "4294967295", "4294967296", "0", "01", "12a", "\u0661", ""])
TASKS = (["", "_0", "_04", "_1234567"], ["_12345678", "_[1-3]", "_", "_x", "+0"])
STEPS = (["", ".batch", ".extern", ".0", ".ext+"], [".0+0", ".", ".a.batch", ".batch ", ".\u0661"])
STATES = (["RUNNING", "COMPLETED", "CANCELLED by 0", "COMPLETED+", "R"],
          ["RUNNING ", " RUNNING", "running", "", "CANCELLED  by 0", "CANCELLED by "])
EXITS = (["0:0", "1:0", "0:15", "00:0", "255:9", "256:300", "4294967295:0", "1234567890:0"],
         ["12345678901:0", "0:12345678901", "x:y", "1:", "", " 0:0", "0:0 "])
REASONS = (["None", "", "Priority", "NonZeroExitCode"], ["(null)", " None", "Bad reason", "None "])
NAMES = (["a", "dd-x", "a|b", "", "\u00e9 b"], ["a\u2028b", "a\rb", "a\x1cb", "a\x85", "a\x0bb", "a\x0cb", "\x1d",
                                          "\x1e", "\u2029"])
SACCT_COLUMNS = (JOBS, TASKS, STEPS, JOBS, STATES, EXITS, REASONS, NAMES)
SQUEUE_COLUMNS = (JOBS, TASKS, JOBS, STATES, REASONS, NAMES)


@st.composite
def plain_but_one(draw, columns: tuple, lines: int) -> list[list[str]]:
    """Up to `lines` rows of plain fields; then, in most examples, one field of one row made odd."""
    rows = draw(st.lists(st.tuples(*(st.sampled_from(plain) for plain, _ in columns)).map(list), max_size=lines))
    if rows and draw(st.booleans()):
        line, column = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, len(columns) - 1))
        rows[line][column] = draw(st.sampled_from(columns[column][1]))
    return rows


def sacct_text(rows: list[list[str]], newline_at_end: bool) -> str:
    """sacct lines: each row's job line, then, if the row has a step, that step's line
    (`12_3.batch|15.batch|...`) with the same state, exit code, reason and name."""
    lines = []
    for job, task, step, raw, *rest in rows:
        lines.append("|".join([job + task, raw, *rest]))
        if step:
            lines.append("|".join([job + task + step, raw + step, *rest]))
    return "\n".join(lines) + ("\n" if newline_at_end and lines else "")


def outcome(parser, text: str):
    try:
        return parser(text, True)
    except OutputError as err:
        return f"OutputError: {err}"


@given(plain_but_one(SACCT_COLUMNS, 6), st.booleans())
def test_sacct_one_pass_agrees_with_line_by_line(rows: list[list[str]], newline_at_end: bool) -> None:
    """parse_sacct (one regex pass when every line is plain) == parse_sacct_lines, on plain output
    and on output with one field just off plain: rows, step rows and batch signals, or the error."""
    text = sacct_text(rows, newline_at_end)
    assert outcome(parse.parse_sacct_lines, text) == outcome(parse.parse_sacct, text)


@given(plain_but_one(SQUEUE_COLUMNS, 6), st.booleans())
def test_squeue_one_pass_agrees_with_line_by_line(rows: list[list[str]], newline_at_end: bool) -> None:
    """parse_squeue (one regex pass when every line is plain) == parse_squeue_lines."""
    text = "\n".join("|".join([job + task, *rest]) for job, task, *rest in rows) + ("\n" if newline_at_end else "")
    assert outcome(parse.parse_squeue_lines, text) == outcome(parse.parse_squeue, text)


ODD_SACCT = [(column, odd) for column, (_, odds) in enumerate(SACCT_COLUMNS) for odd in odds]
ODD_SQUEUE = [(column, odd) for column, (_, odds) in enumerate(SQUEUE_COLUMNS) for odd in odds]
PLAIN_SACCT = [["12", "_3", ".batch", "15", "CANCELLED by 0", "0:15", "None", "dd-x"], ["16", "", "", "16", "R", "0:0",
                                                                                        "", "a|b"]]
PLAIN_SQUEUE = [["12", "_3", "15", "RUNNING", "None", "dd-x"], ["16", "", "16", "PENDING", "Priority", "a|b"]]


@pytest.mark.parametrize(("column", "odd"), ODD_SACCT, ids=[f"{c}-{o!r}" for c, o in ODD_SACCT])
def test_each_odd_sacct_field_agrees(column: int, odd: str) -> None:
    """Every value just off plain, in every column of plain sacct output (job and step rows):
    the one-pass parse declines it, so both parses give the same rows or the same error."""
    for line in range(len(PLAIN_SACCT)):
        rows = [list(row) for row in PLAIN_SACCT]
        rows[line][column] = odd
        text = sacct_text(rows, True)
        assert outcome(parse.parse_sacct_lines, text) == outcome(parse.parse_sacct, text)


@pytest.mark.parametrize(("column", "odd"), ODD_SQUEUE, ids=[f"{c}-{o!r}" for c, o in ODD_SQUEUE])
def test_each_odd_squeue_field_agrees(column: int, odd: str) -> None:
    """Every value just off plain, in every column of plain squeue output: both parses agree."""
    for line in range(len(PLAIN_SQUEUE)):
        rows = [list(row) for row in PLAIN_SQUEUE]
        rows[line][column] = odd
        text = "".join("|".join([job + task, *rest]) + "\n" for job, task, *rest in rows)
        assert outcome(parse.parse_squeue_lines, text) == outcome(parse.parse_squeue, text)


def test_plain_output_takes_the_one_pass_path() -> None:
    """Output as Slurm prints it for dd-slurm's jobs (tasks, batch and extern steps, a cancelled
    job's batch signal) is plain: the one-pass parse applies, and gives the line-by-line rows."""
    sacct = ("12_3|15|CANCELLED by 0|0:0|None|dd-x\n12_3.batch|15.batch|CANCELLED|0:15||batch\n"
             "12_3.extern|15.extern|COMPLETED|0:0||extern\n16|16|COMPLETED|0:0|None|dd-y|z\n")
    squeue = "12_4|17|RUNNING|None|dd-x\n18|18|PENDING|Priority|dd-y\n"
    assert parse._plain_lines(parse._SACCT_PLAIN, sacct) is not None
    assert parse._plain_lines(parse._SQUEUE_PLAIN, squeue) is not None
    assert parse.parse_sacct_lines(sacct, True) == parse.parse_sacct(sacct, True)
    assert 15 == parse.parse_sacct(sacct, True)[0].signal
    assert parse.parse_squeue_lines(squeue, True) == parse.parse_squeue(squeue, True)


def test_collection_is_paused_only_while_parsing() -> None:
    """The parsers pause garbage collection while they build rows and restore it as it was,
    after rows and after an OutputError alike (and leave it off if the caller had it off)."""
    import gc

    seen = []
    for text in ("5|5|RUNNING|None|x\n", "5|5|RUNNING\n"):
        for parser in (parse.parse_squeue, parse.parse_sacct):
            outcome(parser, text)
            seen.append(gc.isenabled())
    gc.disable()
    try:
        outcome(parse.parse_sacct, "5|5|RUNNING|0:0|None|x\n")
        seen.append(gc.isenabled())
    finally:
        gc.enable()
    assert [True, True, True, True, False] == seen
