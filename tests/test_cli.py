"""The CLI as users run it: exit codes, one-line errors, lazy imports, generated statecharts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.machine.attempt import Attempt
from dd_slurm.machine.journal import Journal
from tests.conftest import PLANS, ROOT
from tests.machine.fakes import ScriptedActions

INVALID = [
    tuple(line.split("\t"))
    for line in (PLANS / "invalid" / "expected.tsv").read_text().splitlines()
    if line and not line.startswith("#")
]


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kwargs)


def test_validate_accepts_every_valid_fixture(dd_slurm_exe) -> None:
    """`dd-slurm validate fixtures/plans/*.json` exits 0 and prints one ok line per plan."""
    plans = sorted(str(p) for p in PLANS.glob("*.json"))
    result = run(dd_slurm_exe + ["validate", *plans])
    assert (0, "") == (result.returncode, result.stderr)
    assert len(plans) == len(result.stdout.splitlines())


@pytest.mark.parametrize(("name", "expected"), INVALID[:8], ids=[n for n, _ in INVALID[:8]])
def test_validate_prints_one_line_and_exits_2(dd_slurm_exe, name: str, expected: str) -> None:
    """An invalid plan: exit 2, exactly one line on stderr naming the field, nothing on stdout."""
    result = run(dd_slurm_exe + ["validate", str(PLANS / "invalid" / name)])
    assert (2, expected + "\n", "") == (result.returncode, result.stderr, result.stdout)


def test_validate_json_output(dd_slurm_exe) -> None:
    """`--json` reports each plan's validity and digest, still exiting 2 when one is invalid."""
    result = run(dd_slurm_exe + ["validate", "--json", str(PLANS / "single-node.json"),
                                 str(PLANS / "invalid" / "bad-mem.json")])
    report = json.loads(result.stdout)
    assert (2, [True, False]) == (result.returncode, [r["valid"] for r in report])


def test_diagram_check_passes_on_the_committed_statecharts(dd_slurm_exe) -> None:
    """The committed statecharts/ are what the table generates now."""
    result = run(dd_slurm_exe + ["diagram", "--check"], cwd=ROOT)
    assert 0 == result.returncode, result.stderr


def test_diagram_check_fails_on_stale_files(dd_slurm_exe, tmp_path) -> None:
    """A hand-edited statechart is reported stale with exit 1; regenerating fixes it."""
    assert 0 == run(dd_slurm_exe + ["diagram", "--dir", str(tmp_path)]).returncode
    (tmp_path / "attempt.mmd").write_text("edited\n")
    stale = run(dd_slurm_exe + ["diagram", "--check", "--dir", str(tmp_path)])
    assert 1 == stale.returncode
    assert "attempt.mmd" in stale.stderr


def test_statechart_markdown_lists_every_transition() -> None:
    """The Markdown statechart has one table row per declared edge."""
    from dd_slurm.machine import table

    text = (ROOT / "statecharts" / "attempt.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `") and line.count("|") == 7]
    assert len(table.EDGES) == len(rows)


def test_help_does_not_import_the_runtime() -> None:
    """`dd-slurm --help` stays cheap: no transitions, cattrs or runtime modules are imported."""
    code = ("import sys; from dd_slurm.cli import cli\n"
            "try: cli.main(['--help'], standalone_mode=False)\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('transitions', 'cattrs', 'attrs') or m.startswith('dd_slurm.runtime')))")
    result = run([sys.executable, "-c", code])
    assert "[]" == result.stdout.strip().splitlines()[-1]


def test_inspect_reads_the_journal(dd_slurm_exe, tmp_path) -> None:
    """`inspect --json` shows the state, outcome and history written by another process."""
    (tmp_path / "plan.json").write_text("{}")
    attempt = Attempt(ScriptedActions({"deployments_ready": "raise"}), Journal(tmp_path, FakeClock()))
    attempt.advance()
    result = run(dd_slurm_exe + ["inspect", "--json", str(tmp_path)])
    view = json.loads(result.stdout)
    summary = view["attempt"]
    assert ("done", "failed", "internal_error") == (summary["state"], summary["outcome"], summary["reason"])
    assert [("verified", None), ("preflight", None), ("deploying", None), ("cleanup", "deployments_ready"),
            ("done", "deployments_ready")] == [(e["to"], e.get("detail")) for e in view["history"]]
    text = run(dd_slurm_exe + ["inspect", str(tmp_path)]).stdout
    assert text.startswith(f"attempt {tmp_path.name}: done (failed, internal_error)")


def test_inspect_of_a_missing_dir_is_one_line_exit_2(dd_slurm_exe, tmp_path) -> None:
    """A path that is not an attempt dir: exit 2, one line, no traceback."""
    result = run(dd_slurm_exe + ["inspect", str(tmp_path / "nope")])
    assert 2 == result.returncode
    assert 1 == len(result.stderr.splitlines())
    assert result.stderr.startswith("error: ")


@pytest.mark.parametrize(("attempt", "obs", "agrees"), [
    ({"state": "done", "outcome": "succeeded"}, {"state": "completed", "terminal": True}, True),
    ({"state": "done", "outcome": "failed"}, {"state": "failed", "terminal": True}, True),
    ({"state": "done", "outcome": "cancelled"}, {"state": "cancelled", "terminal": True}, True),
    ({"state": "done", "outcome": "failed"}, {"state": "completed", "terminal": True}, False),
    ({"state": "client", "outcome": None}, {"state": "timeout", "terminal": True}, False),
    ({"state": "client", "outcome": None}, {"state": "running", "terminal": False}, True),
])
def test_scheduler_and_attempt_agreement(attempt, obs, agrees) -> None:
    """`status` flags a finished job whose attempt did not end, or whose outcome contradicts it."""
    from dd_slurm.control.report import disagreement

    assert agrees == (disagreement(attempt, obs) is None)


def _fake_env(fake_slurm) -> dict:
    import os

    return {**os.environ, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}


@pytest.mark.timeout(120)
def test_submit_then_status_watch_follows_the_attempt_to_its_end(dd_slurm_exe, fake_slurm, tmp_path) -> None:
    """On fake Slurm the whole loop runs: submit returns at once, the job really runs the attempt
    (through fake srun), and `status --watch` prints progress lines until done and terminal."""
    from tests.runtime.harness import plan_data

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_data("single-node")))
    env = _fake_env(fake_slurm)
    out = run(dd_slurm_exe + ["submit", "--json", str(plan), "-w", str(tmp_path / "ws")], env=env)
    attempt = json.loads(out.stdout)["attempt_dir"]
    watched = run(dd_slurm_exe + ["status", "--watch", "--interval", "0.2", attempt], env=env)
    last = watched.stdout.strip().splitlines()[-1]
    assert 0 == watched.returncode, watched.stderr
    assert "done" in last and "completed" in last and "succeeded (ok)" in last


@pytest.mark.timeout(120)
def test_advance_stops_at_a_state_and_a_fresh_process_continues(dd_slurm_exe, fake_slurm, tmp_path) -> None:
    """`advance --until verified` stops there (no process left running); another process's
    `advance` continues from the journal to done."""
    from tests.runtime.harness import allocation_env, plan_data, stage_plan

    staged = stage_plan(tmp_path, plan_data("single-node"))
    env = {**allocation_env(fake_slurm.bin_dir, ("127.0.2.1",), 1), "PATH": "/usr/bin:/bin"}
    first = run(dd_slurm_exe + ["advance", str(staged.attempt_dir), "--until", "verified"], env=env)
    assert ("verified", 0) == (first.stdout.strip(), first.returncode), first.stderr
    second = run(dd_slurm_exe + ["advance", str(staged.attempt_dir)], env=env)
    assert "done" == second.stdout.strip()
    summary = json.loads(run(dd_slurm_exe + ["inspect", "--json", str(staged.attempt_dir)]).stdout)["attempt"]
    assert ("succeeded", "ok") == (summary["outcome"], summary["reason"])


def test_watch_stops_when_there_is_nothing_to_watch(dd_slurm_exe, tmp_path) -> None:
    """`status --watch` on an attempt that was staged but never submitted prints once and stops."""
    from tests.runtime.harness import plan_data, stage_plan

    staged = stage_plan(tmp_path, plan_data("single-node"))
    watched = run(dd_slurm_exe + ["status", "--watch", str(staged.attempt_dir)])
    assert (0, "not submitted: nothing to watch") == (watched.returncode, watched.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(60)
def test_watch_stops_and_warns_when_the_job_ended_without_the_attempt(dd_slurm_exe, fake_slurm, tmp_path) -> None:
    """A job that ended while its attempt never reached done (here the supervisor never ran: the
    batch script's interpreter is /bin/false): watching stops and says so instead of waiting
    forever, with the outcome from the job and reason never_started."""
    from tests.runtime.harness import plan_data

    data = plan_data("single-node")
    data["runtime"]["python"] = "/bin/false"  # the batch script's exec fails: the supervisor never runs
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    env = _fake_env(fake_slurm)
    attempt = json.loads(run(dd_slurm_exe + ["submit", "--json", str(plan), "-w", str(tmp_path / "ws")],
                             env=env).stdout)["attempt_dir"]
    watched = run(dd_slurm_exe + ["status", "--watch", "--interval", "0.2", attempt], env=env)
    assert ("=> failed (never_started), exit 4", "warning: the job is failed and its supervisor never ran "
            "(ended before it started?)") == (watched.stdout.splitlines()[0].split("  ")[-1],
                                               watched.stdout.splitlines()[1])


def test_malformed_scheduler_output_leaves_persisted_state_unchanged(dd_slurm_exe, fake_slurm, tmp_path) -> None:
    """squeue printing garbage: `status` exits 3 with one line naming the line of output, and
    attempt.json is byte for byte what it was."""
    from tests.runtime.harness import plan_data

    data = plan_data("single-node")
    data["runtime"]["python"] = "/bin/sleep"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    env = _fake_env(fake_slurm)
    attempt = json.loads(run(dd_slurm_exe + ["submit", "--json", str(plan), "-w", str(tmp_path / "ws")],
                             env=env).stdout)["attempt_dir"]
    before = (tmp_path / "ws" / "attempts" / attempt.rsplit("/", 1)[1] / "attempt.json").read_bytes()
    fake_slurm.add_fault("squeue", exit=0, stdout="1234|RUNNING\n")
    result = run(dd_slurm_exe + ["status", "--json", attempt], env=env)
    assert (3, 1) == (result.returncode, len(result.stderr.splitlines()))
    assert "squeue line 1" in result.stderr
    assert before == (tmp_path / "ws" / "attempts" / attempt.rsplit("/", 1)[1] / "attempt.json").read_bytes()


def test_help_lists_the_users_commands_apart_from_the_in_allocation_ones() -> None:
    """`dd-slurm --help`: every command once; `run` and `advance` (what the batch script runs) in
    their own section after the user's commands."""
    from click.testing import CliRunner

    from dd_slurm.cli import cli

    out = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    sections = {}
    for block in out.split("\n\n"):
        title, *rows = block.strip().splitlines()
        sections[title] = [row.split()[0] for row in rows if row.startswith("  ")]
    assert (["cancel", "clean", "diagram", "inspect", "list", "logs", "query", "render", "stage", "status", "submit",
             "validate"], ["advance", "run"]) == (
        sections["Commands:"], sections["Inside the allocation (the batch script runs these):"])


def test_validate_warns_of_a_shell_variable_and_still_passes(dd_slurm_exe, tmp_path) -> None:
    """A valid plan with `$HF_HOME` in an argument: exit 0, the ok line, one warning line on stderr."""
    data = json.loads((PLANS / "single-node.json").read_text())
    data["deployments"][0]["argv"] += ["--download-dir", "$HF_HOME"]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    result = run(dd_slurm_exe + ["validate", str(tmp_path / "plan.json")])
    assert (0, True, 1) == (result.returncode, result.stdout.startswith("ok "),
                            len([line for line in result.stderr.splitlines() if line.startswith("warning: ")]))


def test_the_readme_s_completion_one_liner_completes_commands_and_options(dd_slurm_exe, clean_env, tmp_path) -> None:
    """`eval "$(_DD_SLURM_COMPLETE=bash_source dd-slurm)"` in bash registers a completion that,
    asked for `dd-slurm sta` and `dd-slurm status --wa`, offers `stage status` and `--watch`; for
    an attempt, the workspace's ids that start with what was typed, and directories."""
    from pathlib import Path

    (tmp_path / "ws" / "attempts" / "first-20261206T120000-aaaaaa").mkdir(parents=True)
    (tmp_path / "ws" / "runs" / "first-20261206T130000-bbbbbb").mkdir(parents=True)
    env = {**clean_env, "PATH": f"{Path(dd_slurm_exe[0]).parent}:{clean_env['PATH']}",
           "DD_SLURM_WORKSPACE": str(tmp_path / "ws")}
    script = ('eval "$(_DD_SLURM_COMPLETE=bash_source dd-slurm)"\n'
              'for line in "dd-slurm sta" "dd-slurm status --wa" "dd-slurm logs fir" "dd-slurm status ws/ru"; do\n'
              '  COMP_WORDS=($line); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()\n'
              '  _dd_slurm_completion dd-slurm; echo "${COMPREPLY[*]}"\n'
              'done\n')
    assert "_DD_SLURM_COMPLETE=bash_source dd-slurm" in (ROOT / "README.md").read_text()
    result = run(["bash", "--norc", "-c", script], env=env, cwd=tmp_path)
    assert (0, ["stage status", "--watch", "first-20261206T120000-aaaaaa first-20261206T130000-bbbbbb", ""]) == (
        result.returncode, result.stdout.splitlines()), result.stderr
    path = run(dd_slurm_exe, env={**env, "COMP_WORDS": "dd-slurm status ws/ru", "COMP_CWORD": "2",
                                  "_DD_SLURM_COMPLETE": "bash_complete"}, cwd=tmp_path)
    assert "dir,ws/ru" == path.stdout.strip()  # bash then completes directory names itself (compopt -o dirnames)
