"""Parser corpora (fixtures/slurm/corpus/*.tsv: input, expected rows or error) and hypothesis
properties: whatever the tools print, the parsers give rows or a typed error naming the line."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import OutputError
from dd_slurm.runtime.hostlist import expand_hostlist
from dd_slurm.scheduler import parse
from tests.conftest import FIXTURES

CORPUS = FIXTURES / "slurm" / "corpus"


def cases(name: str) -> list:
    out = []
    for number, line in enumerate((CORPUS / f"{name}.tsv").read_text().splitlines(), 1):
        if line.startswith("#") or not line.strip():
            continue
        text, expected = line.split("\t")
        text = re.sub(r"\{9\*(\d+)\}", lambda m: "9" * int(m.group(1)), text)
        out.append(pytest.param(text.encode().decode("unicode_escape"), json.loads(expected), id=f"{name}:{number}"))
    return out


def outcome(fn, *args):
    try:
        return fn(*args)
    except (OutputError, ValueError) as err:
        return err


def check(expected, actual) -> None:
    if isinstance(expected, str) and expected.startswith("error: "):
        assert isinstance(actual, Exception), actual
        assert expected[len("error: "):] in str(actual)
    else:
        assert expected == actual


@pytest.mark.parametrize(("text", "expected"), cases("sacct"))
def test_sacct_corpus(text: str, expected) -> None:
    """Each sacct corpus line parses to its rows (job, task, het, state, exit, signal, raw id) or
    to an OutputError naming the line, never another exception."""
    found = outcome(parse.parse_sacct, text, True)
    if not isinstance(found, Exception):
        found = [[r.job, r.task, r.het, r.raw_state, r.exit_code, r.signal, r.raw] for r in found]
    else:
        assert isinstance(found, OutputError)
    check(expected, found)


@pytest.mark.parametrize(("text", "expected"), cases("squeue"))
def test_squeue_corpus(text: str, expected) -> None:
    """Each squeue corpus line parses to its rows (job, task, het, state, reason, raw id) or to
    an OutputError naming the line."""
    found = outcome(parse.parse_squeue, text, True)
    if not isinstance(found, Exception):
        found = [[r.job, r.task, r.het, r.raw_state, r.reason, r.raw] for r in found]
    else:
        assert isinstance(found, OutputError)
    check(expected, found)


@pytest.mark.parametrize(("text", "expected"), cases("sbatch"))
def test_sbatch_corpus(text: str, expected) -> None:
    """sbatch ids are ASCII digits naming a 32-bit job id other than 0; anything else is an error."""
    found = outcome(parse.parse_sbatch, text)
    assert not isinstance(found, Exception) or isinstance(found, OutputError)
    check(expected, found)


@pytest.mark.parametrize(("text", "expected"), cases("hostlist"))
def test_hostlist_corpus(text: str, expected) -> None:
    """Hostlists expand as Slurm does; reversed ranges, unbalanced brackets and more than 64K names
    are errors (ValueError), as Slurm rejects them (dd-slurm is stricter for a few: STRICTER in
    tests/slurm/test_hostlist_real.py)."""
    found = outcome(expand_hostlist, text)
    if isinstance(expected, dict):
        found = {"count": len(found)}
    check(expected, found)


ids = st.one_of(st.integers(0, 10**12).map(str), st.text(st.characters(categories=("Nd", "No")), min_size=1, max_size=12),
                st.text("0123456789", min_size=11, max_size=6000))
fields = st.one_of(ids, st.text(max_size=30), st.sampled_from(["RUNNING", "COMPLETED", "0:0", "None", "[1-3]"]))
lines = st.lists(fields, min_size=1, max_size=7).map("|".join)


@given(st.lists(lines, max_size=5))
def test_parsers_never_raise_anything_but_output_error(rows) -> None:
    """Lines made of odd numbers (non-ASCII digits, thousands of digits), text and bars: each
    parser (either format) answers rows or OutputError naming a line, never a bare ValueError."""
    text = "\n".join(rows)
    for parser in (parse.parse_squeue, parse.parse_sacct):
        for raw_ids in (False, True):
            try:
                parser(text, raw_ids)
            except OutputError as err:
                assert re.match(r"(squeue|sacct) line \d+: ", str(err)), str(err)


@given(st.text(max_size=40) | ids)
def test_sbatch_ids_are_plain_32_bit_numbers(text: str) -> None:
    """Whatever sbatch prints, the id returned is ASCII digits in 1..2**32-1, or OutputError."""
    try:
        job = parse.parse_sbatch(text)
    except OutputError:
        return
    assert job.isascii() and job.isdigit() and 0 < int(job) < 2**32 and not job.startswith("0")


@given(st.text(alphabet="n[]-,0123456789\u0661", max_size=24))
def test_hostlists_never_raise_anything_but_value_error(text: str) -> None:
    """Any hostlist text expands to at most 64K names or raises ValueError."""
    try:
        assert len(expand_hostlist(text)) <= 65536
    except ValueError:
        pass
