"""Naming an attempt: its directory, its id or the unique start of one in the workspace, or
--last (the newest; a run counts as one where runs are accepted)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dd_slurm.control.addressing import resolve
from dd_slurm.errors import InvalidInput

IDS = {"attempts": ["gen-20261201T080000-aaaaaa", "gen-20261201T090000-bbbbbb", "judge-20261201T090000-cccccc",
                    "big-20261202T100000-dddddd-s0000", "big-20261202T100000-dddddd-s0001"],
       "runs": ["big-20261202T100000-dddddd"]}


@pytest.fixture
def workspace(tmp_path) -> Path:
    for place, names in IDS.items():
        for index, name in enumerate(names):
            (tmp_path / place / name).mkdir(parents=True)
            os.utime(tmp_path / place / name, ns=(index, index))
    (tmp_path / "attempts" / ".list-cache.json").mkdir()
    return tmp_path


@pytest.mark.parametrize(("target", "last", "runs", "expected"), [
    ("gen-20261201T090000-bbbbbb", False, False, "attempts/gen-20261201T090000-bbbbbb"),
    ("judge", False, False, "attempts/judge-20261201T090000-cccccc"),
    ("big-20261202T100000-dddddd", False, True, "runs/big-20261202T100000-dddddd"),
    ("big-20261202T100000-dddddd-s0001", False, True, "attempts/big-20261202T100000-dddddd-s0001"),
    (None, True, True, "runs/big-20261202T100000-dddddd"),
    (None, True, False, "attempts/big-20261202T100000-dddddd-s0001"),
])
def test_an_attempt_is_found_by_id_prefix_or_last(workspace: Path, target, last: bool, runs: bool, expected) -> None:
    """An exact id, a unique prefix; --last: the newest by the time in its id (a run where runs
    count, else the run's last shard)."""
    assert str(workspace / expected) == resolve(target, last, str(workspace), runs)


@pytest.mark.parametrize(("target", "last", "message"), [
    ("gen", False, "gen: names 2 attempts in {ws}: gen-20261201T080000-aaaaaa, gen-20261201T090000-bbbbbb"),
    ("nothing", False, "nothing: no such attempt directory, nor an attempt id in {ws} (dd-slurm list shows them)"),
    ("gen", True, "--last names the attempt; 'gen' would name another"),
    (None, False, "name an attempt: its directory, its id, or --last"),
])
def test_an_ambiguous_or_unknown_name_is_one_clear_error(workspace: Path, target, last: bool, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        resolve(target, last, str(workspace), False)
    assert message.format(ws=workspace) == str(err.value)


def test_a_path_is_taken_as_it_is_and_last_needs_a_workspace(tmp_path) -> None:
    """A target with a `/` is a path (checked later as before); --last without any workspace says
    how to give one."""
    assert "./gen" == resolve("./gen", False, str(tmp_path), False)
    with pytest.raises(InvalidInput, match="--last needs a workspace: pass -w DIR, set DD_SLURM_WORKSPACE"):
        resolve(None, True, None, False)


def test_a_run_named_where_one_attempt_is_wanted_says_so(workspace: Path) -> None:
    """`inspect`/`logs` of a run's id: the run is not one attempt (its shards are), said plainly;
    an ambiguous prefix lists the run first."""
    with pytest.raises(InvalidInput, match="big-20261202T100000-dddddd: a run of shards, not one attempt"):
        resolve("big-20261202T100000-dddddd", False, str(workspace), False)
    with pytest.raises(InvalidInput, match=r"big: names 3 attempts in .*: big-20261202T100000-dddddd, "):
        resolve("big", False, str(workspace), True)
