"""Parsers and state normalization: recorded real output, every state, hypothesis round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import OutputError
from dd_slurm.scheduler import parse
from dd_slurm.scheduler.observe import from_row, index_rows
from dd_slurm.scheduler.states import VOCABULARY, normalize_state
from tests.conftest import FIXTURES
from tests.slurm.clusters import table

SLURM = FIXTURES / "slurm"
VERSIONS = list(table())  # 22.05's recordings are fixtures/slurm/*.json, a newer release's fixtures/slurm/<version>/


def recorded(version: str, case: str) -> dict:
    return json.loads(((SLURM if version == "22.05" else SLURM / version) / f"{case}.json").read_text())


def expected(version: str) -> dict:
    return json.loads((SLURM / "expected" / ("observations.json" if version == "22.05" else
                                             f"observations-{version}.json")).read_text())


CASES = [(version, case) for version in VERSIONS for case in sorted(expected(version))]


@pytest.mark.parametrize(("version", "case"), CASES, ids=[f"{v}-{c}" for v, c in CASES])
def test_recorded_real_output_normalizes_as_reviewed(version: str, case: str) -> None:
    """Each recorded squeue/sacct output (fixtures/slurm/[<version>/]<case>.json) normalizes to the
    reviewed observations in fixtures/slurm/expected/observations[-<version>].json."""
    output = recorded(version, case)
    tool = case.split("-")[0]
    raw_ids = any("%A" in arg or "JobIDRaw" in arg for arg in output["command"])
    rows = (parse.parse_squeue if tool == "squeue" else parse.parse_sacct)(output["stdout"], raw_ids=raw_ids)
    actual = [from_row(key, row, tool).to_json() for key, row in sorted(index_rows(rows).items())]
    assert expected(version)[case] == actual
    assert output["slurm_version"].startswith(f"slurm-wlm {version}.")


@pytest.mark.parametrize("version", VERSIONS)
def test_recorded_sbatch_output_gives_the_job_id(version: str) -> None:
    """`sbatch --parsable` output recorded from each real cluster yields its job id."""
    output = recorded(version, "sbatch-completed")
    assert output["stdout"].strip() == parse.parse_sbatch(output["stdout"])


def _json_job_state(output: dict) -> str:
    return type(json.loads(output["stdout"])["jobs"][0]["job_state"]).__name__


# What differs between the releases, each seen in a recorded fixture (README, "Slurm versions").
# dd-slurm's own queries (squeue --format, sacct --parsable2) read the same on every release.
DIFFERENCES = {
    "sacct --array is an option": ("sacct-no-array-option", lambda o: o["returncode"] == 0,
                                   {"22.05": False, "24.11": True, "26.05": True}),
    "squeue --json job_state is a": ("squeue-json-pending", _json_job_state,
                                     {"22.05": "str", "24.11": "list", "26.05": "list"}),
    "sacct lists a held job": ("sacct-pending", lambda o: bool(o["stdout"].strip()),
                               {"22.05": False, "24.11": True, "26.05": True}),
}


@pytest.mark.parametrize("difference", sorted(DIFFERENCES))
def test_what_differs_between_slurm_versions(difference: str) -> None:
    """Each known difference between the releases, as the recorded outputs show it."""
    case, fact, by_version = DIFFERENCES[difference]
    assert by_version == {version: fact(recorded(version, case)) for version in VERSIONS}


STATE_TABLE = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending", "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending", "RESV_DEL_HOLD": "pending", "SPECIAL_EXIT": "pending", "RUNNING": "running",
    "RESIZING": "running", "SIGNALING": "running", "SUSPENDED": "suspended", "STOPPED": "suspended",
    "COMPLETING": "completing", "STAGE_OUT": "completing", "COMPLETED": "completed", "FAILED": "failed",
    "CANCELLED": "cancelled", "CANCELLED by 0": "cancelled", "CANCELLED by 1234": "cancelled",
    "REVOKED": "cancelled", "TIMEOUT": "timeout", "NODE_FAIL": "node_fail", "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "out_of_memory", "BOOT_FAIL": "boot_fail", "DEADLINE": "deadline", "COMPLETED+": "completed",
    "PD": "pending", "R": "running", "CG": "completing", "CD": "completed", "CA": "cancelled", "F": "failed",
    "TO": "timeout", "NF": "node_fail", "OOM": "out_of_memory", "BF": "boot_fail", "DL": "deadline",
    "PR": "preempted", "S": "suspended", "ST": "suspended", "SE": "pending", "RQ": "pending",
    "EXPEDITING": "pending", "BRAND_NEW_STATE": "unknown", "": "unknown",
}


@pytest.mark.parametrize(("raw", "expected"), sorted(STATE_TABLE.items()))
def test_every_slurm_state_maps_to_the_contract_vocabulary(raw: str, expected: str) -> None:
    """Each Slurm state (long, abbreviated, with `by N` or a trailing +) has one contract state;
    text Slurm may add later is `unknown`, never a guess."""
    assert expected == normalize_state(raw)[0]
    assert expected in VOCABULARY


def test_unknown_state_keeps_its_raw_text() -> None:
    """An unrecognised state is `unknown` with the raw text kept for the user."""
    row = parse.parse_squeue("5|WEIRD_NEW|None|x\n")[0]
    observation = from_row("5", row, "squeue")
    assert ("unknown", "WEIRD_NEW", False) == (observation.state, observation.raw_state, observation.terminal)


@pytest.mark.parametrize(("text", "expected"), [
    ("[2-9%2]", [2, 3, 4, 5, 6, 7, 8, 9]), ("[1,3,5-7]", [1, 3, 5, 6, 7]), ("[4]", [4]),
    ("[0-6:3]", [0, 3, 6]), ("[10-12%1]", [10, 11, 12]),
])
def test_array_ranges_expand_per_task(text: str, expected: list[int]) -> None:
    """Pending-range syntax expands to task ids; the %N throttle is not a task."""
    assert expected == parse.expand_tasks(text)


@pytest.mark.parametrize(("tool", "text", "line"), [
    ("squeue", "1|RUNNING|None|a\n2|RUNNING\n", 2),
    ("squeue", "\n\nabc|RUNNING|None|a\n", 3),
    ("sacct", "1|FAILED|x:y|None|a\n", 1),
    ("sacct", "1|COMPLETED|0:0|None|a\n1.batch||0:0||batch\n", 2),
])
def test_a_malformed_row_is_a_typed_error_naming_its_line(tool: str, text: str, line: int) -> None:
    """A row that does not fit raises OutputError naming the tool and line number."""
    with pytest.raises(OutputError) as caught:
        (parse.parse_squeue if tool == "squeue" else parse.parse_sacct)(text)
    assert f"{tool} line {line}:" in str(caught.value)


def test_blank_warning_step_and_het_rows() -> None:
    """Blank and warning lines are skipped, step rows give way to their job, het components stay."""
    text = ("\nsacct: warning: something odd\n7+0|COMPLETED|0:0|None|het\n7+0.batch|COMPLETED|0:0||batch\n"
            "7+1|FAILED|2:0|None|het\n7+1.0|FAILED|2:0||step\n")
    keys = {k: (r.raw_state, r.exit_code) for k, r in index_rows(parse.parse_sacct(text)).items()}
    assert {"7+0": ("COMPLETED", 0), "7+1": ("FAILED", 2)} == keys


job_ids = st.tuples(st.integers(1, 10**7), st.one_of(st.none(), st.integers(0, 10**5)))
states = st.sampled_from(sorted(s for s in STATE_TABLE if s and s != "BRAND_NEW_STATE"))
names = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20)
reasons = st.sampled_from(["None", "Priority", "JobHeldUser", "NonZeroExitCode", "Resources"])


@given(st.lists(st.tuples(job_ids, states, st.integers(0, 255), st.integers(0, 64), reasons, names), max_size=30,
                unique_by=lambda row: row[0]))
def test_sacct_rows_round_trip(rows) -> None:
    """Any rows formatted as sacct prints them (with step rows between) parse back field for field."""
    lines, expected = [], []
    for (job, task), state, code, sig, reason, name in rows:
        job_id = f"{job}_{task}" if task is not None else str(job)
        lines += [f"{job_id}|{state}|{code}:{sig}|{reason}|{name}", f"{job_id}.batch|{state}|{code}:{sig}||batch"]
        expected.append((str(job), None if task is None else str(task), state, code, sig, name))
    parsed = parse.parse_sacct("\n".join(lines) + "\n")
    assert expected == [(r.job, r.task, r.raw_state, r.exit_code, r.signal, r.name) for r in parsed]


@given(st.lists(st.tuples(job_ids, states, reasons, names), max_size=30))
def test_squeue_rows_round_trip(rows) -> None:
    """Any rows in dd-slurm's squeue format parse back field for field (names may contain |)."""
    text = "".join(f"{j}{'_' + str(t) if t is not None else ''}|{s}|{r}|{n}\n" for (j, t), s, r, n in rows)
    parsed = parse.parse_squeue(text)
    expected = [(str(j), None if t is None else str(t), s.strip(), None if r == "None" else r, n)
                for (j, t), s, r, n in rows]
    assert expected == [(p.job, p.task, p.raw_state, p.reason, p.name) for p in parsed]


@given(st.text(max_size=200))
def test_parsers_never_crash_on_arbitrary_text(text: str) -> None:
    """Whatever the tools print, parsing ends in rows or an OutputError, never another exception."""
    for parser in (parse.parse_squeue, parse.parse_sacct):
        try:
            parser(text)
        except OutputError:
            pass
