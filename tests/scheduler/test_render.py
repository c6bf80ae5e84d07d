"""Rendering: golden scripts, and for any accepted field value a script that bash accepts, whose
directives sbatch reads back exactly, and whose running touches nothing outside the attempt dir."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.errors import RenderError
from dd_slurm.plan.io import parse_plan
from dd_slurm.scheduler.render import BOOT, ScriptContext, directives, render_script
from dd_slurm.testing.sbatch_directives import read_directives
from tests.conftest import FIXTURES, PLANS

GOLDEN = FIXTURES / "golden"
CTX = ScriptContext("golden-20260101T000000-abcdef", "/ws/attempts/golden-20260101T000000-abcdef",
                    "/ws/bundles/" + "b" * 64, "b" * 64, "p" * 64, entry_sha256="e" * 64)
PLAN_FILES = sorted(PLANS.glob("*.json"))


@pytest.mark.parametrize("plan_file", PLAN_FILES, ids=lambda p: p.stem)
def test_rendered_script_matches_golden(plan_file: Path) -> None:
    """Each fixture plan renders byte-for-byte to fixtures/golden/<plan>.sbatch
    (regenerate with DD_SLURM_UPDATE_GOLDEN=1 after an intended change)."""
    plan = parse_plan(plan_file.read_text())
    actual = render_script(plan, CTX)
    golden = GOLDEN / f"{plan_file.stem}.sbatch"
    if os.environ.get("DD_SLURM_UPDATE_GOLDEN") == "1":
        golden.write_text(actual)
    assert golden.read_text() == actual


BASE = json.loads((PLANS / "single-node.json").read_text())
SCHEDULER_TEXT = st.text(  # anything validation accepts: no control or format characters, no leading '-'
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), min_size=1, max_size=30
).filter(lambda text: not text.startswith("-"))


def _plan_with(**job_fields):
    data = json.loads(json.dumps(BASE))
    data["job"].update(job_fields)
    return parse_plan(json.dumps(data))


@settings(max_examples=150)
@given(comment=SCHEDULER_TEXT, account=SCHEDULER_TEXT, constraint=SCHEDULER_TEXT)
def test_any_accepted_value_yields_exactly_the_intended_directives(comment, account, constraint) -> None:
    """Whatever text passes validation comes back from the script, as sbatch reads it, unchanged;
    and bash accepts the script's syntax."""
    plan = _plan_with(comment=comment, account=account, constraint=constraint)
    script = render_script(plan, CTX)
    assert directives(plan, CTX) == read_directives(script)
    assert 0 == subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True).returncode


@settings(max_examples=25)
@given(comment=SCHEDULER_TEXT, account=SCHEDULER_TEXT)
def test_running_the_script_touches_only_the_attempt_dir(tmp_path_factory, comment, account) -> None:
    """Executed, the script of any accepted field values only execs the runtime's python with the
    attempt's arguments: a recorder writes them inside the attempt dir, and nothing else appears
    (the attempt dir's own name is hostile too)."""
    tmp_path = tmp_path_factory.mktemp("run")
    recorder = tmp_path / "python"
    recorder.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$DD_TEST_ATTEMPT/argv.txt"\n')
    recorder.chmod(0o755)
    data = json.loads(json.dumps(BASE))
    data["runtime"]["python"] = str(recorder)
    data["job"].update(comment=comment, account=account)
    plan = parse_plan(json.dumps(data))
    attempt = tmp_path / "attempt dir $(touch pwned) `id`"
    attempt.mkdir()
    ctx = ScriptContext("t-1", str(attempt), "/ws/bundles/b", "b", "p", entry_sha256="e" * 64)
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(plan, ctx))
    before = set(tmp_path.rglob("*"))
    env = {"PATH": "/usr/bin:/bin", "DD_TEST_ATTEMPT": str(attempt)}
    assert 0 == subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, timeout=10).returncode
    assert {attempt / "argv.txt"} == set(tmp_path.rglob("*")) - before
    expected = ["-I", "-S", "-B", "-c", BOOT, "e" * 64, "b", "/ws/bundles/b/entry.py", "run", str(attempt),
                "--bundle-digest", "b", "--plan-digest", "p"]
    assert expected == (attempt / "argv.txt").read_text().split("\n")[:-1]


def test_directives_cover_every_scheduler_field() -> None:
    """Every optional scheduler field, when set, becomes its directive; exclusive and the
    pre-timeout signal too; --export is an explicit list, never ALL."""
    plan = _plan_with(partition="p", account="a", qos="q", reservation="r", constraint="c", comment="x y",
                      mem="16G", exclusive=True, pre_timeout_signal_s=45)
    found = dict(directives(plan, CTX))
    expected = {"--partition": "p", "--account": "a", "--qos": "q", "--reservation": "r", "--constraint": "c",
                "--comment": "x y", "--mem": "16G", "--exclusive": None, "--signal": "B:USR1@45",
                "--time": "00:10:00", "--nodes": "1", "--gres": "gpu:1", "--job-name": "dd-" + CTX.attempt_id}
    assert expected == {k: found[k] for k in expected}
    assert not found["--export"].startswith("ALL")


def test_context_with_control_characters_is_refused() -> None:
    """Paths chosen by dd-slurm are checked too: a newline in the attempt dir cannot be rendered."""
    plan = _plan_with()
    with pytest.raises(RenderError):
        render_script(plan, ScriptContext("t", "/ws/a\nb", "/ws/b", "b", "p", entry_sha256="e" * 64))


def test_percent_in_the_attempt_dir_is_escaped_for_slurm_patterns() -> None:
    """Slurm expands %-patterns in --output; a literal % in the path is written as %%."""
    plan = _plan_with()
    found = dict(directives(plan, ScriptContext("t", "/ws/100%/a", "/ws/b", "b", "p", entry_sha256="e" * 64)))
    assert "/ws/100%%/a/logs/batch-%j.out" == found["--output"]
