"""The console script's click-free answer for `status [--json] DIR` of an attempt: the same bytes
and exit code as the click CLI, no click import; no scheduler call once the attempt is settled,
one while its job lives. Every other shape of arguments goes to the click CLI, with nothing
printed first."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dd_slurm import console
from dd_slurm.cli import main as cli_main
from tests.control.test_submit_status import fake_job, journal_to, staged

SETTLED = [  # how the attempt got where it is: journal states, outcome, reason, sacct's state
    (("verified", "preflight", "deploying", "ready", "client", "finalize", "cleanup", "done"), "succeeded", "ok",
     "COMPLETED"),
    (("verified", "preflight", "deploying", "cleanup", "done"), "failed", "server_crashed", "FAILED"),
    (("verified", "preflight", "deploying", "ready", "client"), None, None, "CANCELLED"),
    ((), None, None, "TIMEOUT"),
]


def settled_attempt(tmp_path, fake_slurm, fake_commands, clock, states, outcome, reason, sched):
    """An attempt whose job sacct has reported ended (one status call persisted that)."""
    from dd_slurm.control.status import status

    attempt = staged(tmp_path, "1000")
    journal_to(attempt, *states, outcome=outcome, reason=reason)
    fake_job(fake_slurm, "1000", state=sched, exit="0:0")
    assert status(attempt, fake_commands, clock)["scheduler"]["source"] == "sacct"
    return attempt


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(("states", "outcome", "reason", "sched"), SETTLED, ids=[s[3].lower() for s in SETTLED])
def test_a_settled_status_is_the_click_clis_answer(tmp_path, fake_slurm, fake_commands, clock, capsys, states,
                                                   outcome, reason, sched, as_json) -> None:
    """For each settled attempt, text and JSON: the click-free answer prints exactly what
    `dd_slurm.cli` prints for the same arguments, and neither calls the scheduler."""
    attempt = settled_attempt(tmp_path, fake_slurm, fake_commands, clock, states, outcome, reason, sched)
    args = ["status", *(["--json"] if as_json else []), str(attempt)]
    calls = len(fake_slurm.calls())
    cli_main(args)
    by_click = capsys.readouterr().out
    answered = console.answered_from_disk(args)
    assert (True, by_click, calls) == (answered, capsys.readouterr().out, len(fake_slurm.calls()))


def test_a_settled_status_never_imports_click(tmp_path, fake_slurm, fake_commands, clock) -> None:
    """A fresh interpreter answering `status --json DIR` of a settled attempt has not imported
    click (nor the scheduler client) when it is done, and printed the view."""
    attempt = settled_attempt(tmp_path, fake_slurm, fake_commands, clock, *SETTLED[0])
    code = ("import sys; from dd_slurm.console import main; main(['status', '--json', sys.argv[1]]); "
            "print(sorted(m for m in sys.modules if m.startswith(('click', 'dd_slurm.scheduler'))))")
    out = subprocess.run([sys.executable, "-c", code, str(attempt)], capture_output=True, text=True, timeout=60)
    view, imported = out.stdout.rsplit("\n", 2)[0], out.stdout.rsplit("\n", 2)[1]
    assert ("succeeded", "[]") == (json.loads(view)["effective"]["outcome"], imported), out.stderr


def live_attempt(tmp_path, fake_slurm):
    """An attempt whose job squeue shows running, submitted to the fake cluster (its record
    names the fake tools' directory, as submit records the cluster it used)."""
    attempt = staged(tmp_path, "2000", cluster={"name": None, "bin_dir": str(fake_slurm.bin_dir)})
    journal_to(attempt, "verified", "preflight", "deploying")
    fake_job(fake_slurm, "2000", state="RUNNING")
    return attempt


def answer(run, args, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `run(args)`; 0 when it returned."""
    try:
        run(args)
        code = 0
    except SystemExit as done:
        code = done.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("fault", [False, True], ids=["running", "squeue-fails"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_live_status_is_the_click_clis_answer(tmp_path, fake_slurm, capsys, as_json, fault) -> None:
    """A live attempt, text and JSON, squeue answering or failing: the click-free answer prints
    what `dd_slurm.cli` prints and exits with its code (3 and one error line when the scheduler
    cannot answer), each after the same number of scheduler calls."""
    attempt = live_attempt(tmp_path, fake_slurm)
    if fault:
        fake_slurm.add_fault("squeue", exit=1, stderr="squeue: error: Unable to contact slurm controller\n", times=12)
    args = ["status", *(["--json"] if as_json else []), str(attempt)]
    before = len(fake_slurm.calls())
    by_click = answer(cli_main, args, capsys)
    by_click_calls = len(fake_slurm.calls()) - before
    console_answered = answer(lambda a: console.answered_from_disk(a) or sys.exit("not answered"), args, capsys)
    assert (by_click, by_click_calls) == (console_answered, len(fake_slurm.calls()) - before - by_click_calls)
    assert (3 if fault else 0) == by_click[0]


def test_a_live_status_never_imports_click(tmp_path, fake_slurm) -> None:
    """A fresh interpreter answering `status --json DIR` of a live attempt has not imported click
    (nor attrs or cattrs) when it is done, and printed the view with the scheduler's observation."""
    attempt = live_attempt(tmp_path, fake_slurm)
    code = ("import sys; from dd_slurm.console import main; main(['status', '--json', sys.argv[1]]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'attr', 'attrs', 'cattrs')))")
    out = subprocess.run([sys.executable, "-c", code, str(attempt)], capture_output=True, text=True, timeout=60)
    view, imported = out.stdout.rsplit("\n", 2)[0], out.stdout.rsplit("\n", 2)[1]
    assert ("running", "[]") == (json.loads(view)["scheduler"]["state"], imported), out.stderr


def not_settled(tmp_path, fake_slurm, fake_commands, clock) -> list[list[str]]:
    """Argument lists the click CLI must answer: a run dir, no such dir, options."""
    done = settled_attempt(tmp_path / "done", fake_slurm, fake_commands, clock, *SETTLED[0])
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    return [["status", str(run)], ["status", str(tmp_path / "nothing")],
            ["status", "--watch", str(done)], ["status", str(done), "--interval", "1"], ["status", "--help"],
            ["status", "--json", "--json", str(done), "x"], ["inspect", str(done)], ["status"], [],
            ["status", "-", str(done)]]


def test_anything_else_is_left_to_the_click_cli(tmp_path, fake_slurm, fake_commands, clock, capsys) -> None:
    """Every argument list that is not `status [--json] DIR` of an attempt gets False and nothing
    printed, so the click CLI answers it (its errors, its help, a run's scheduler calls)."""
    cases = not_settled(tmp_path, fake_slurm, fake_commands, clock)
    answers = [(case, console.answered_from_disk(case), capsys.readouterr()) for case in cases]
    assert [(case, False, "", "") for case in cases] == [(c, a, out.out, out.err) for c, a, out in answers]


@pytest.mark.timeout(60)
def test_only_the_batch_scripts_run_words_take_the_click_free_way() -> None:
    """`run DIR --bundle-digest D --plan-digest P`, as the rendered script passes it, is read as
    its three values; any other shape (order, --json, a missing or option-like value) is not."""
    words = ["run", "/ws/attempts/a", "--bundle-digest", "d1", "--plan-digest", "p1"]
    others = [words[:4], [*words, "--json"], ["run", "/a", "--plan-digest", "p1", "--bundle-digest", "d1"],
              ["advance", *words[1:]], ["run", "--help", *words[2:]], [*words[:5], ""], [*words[:3], "-x", *words[4:]]]
    assert (("/ws/attempts/a", "d1", "p1"), [None] * len(others)) == \
        (console.run_words(words), [console.run_words(o) for o in others])


@pytest.mark.timeout(60)
def test_the_click_free_run_fails_as_the_click_cli_does(tmp_path) -> None:
    """`run` of a dir that is no attempt, and of an attempt outside an allocation: the same error
    line and exit code from the click-free way (console.main) as from dd_slurm.cli, nothing on stdout."""
    attempt = staged(tmp_path, "1000")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    code = "import sys; from {} import main; main(['run', sys.argv[1], '--bundle-digest', 'd', '--plan-digest', 'p'])"

    def both(target) -> list[tuple[int, str, str]]:
        return [(out.returncode, out.stdout, out.stderr) for out in (
            subprocess.run([sys.executable, "-c", code.format(module), str(target)], capture_output=True, text=True,
                           timeout=60, env=env) for module in ("dd_slurm.console", "dd_slurm.cli"))]

    (free, by_click), (free_outside, by_click_outside) = both(tmp_path / "nothing"), both(attempt)
    assert (by_click, by_click_outside) == (free, free_outside)
    assert [(2, "", True), (2, "", True)] == [
        (by_click[0], by_click[1], "not an attempt directory" in by_click[2]),
        (by_click_outside[0], by_click_outside[1], "not inside a Slurm allocation" in by_click_outside[2])]
