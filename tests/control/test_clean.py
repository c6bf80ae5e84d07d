"""`dd-slurm clean`: finished attempts older than the cutoff go, with the bundles nobody uses;
a live, recent or never-submitted attempt stays, and a run goes only whole."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from dd_slurm.control.clean import parse_age, plan_removal
from dd_slurm.errors import InvalidInput
from tests.control.test_submit_status import fake_job, journal_to, staged

WEEK = 7 * 86400


def age(directory: Path, seconds: float) -> None:
    """Make the attempt look unchanged for `seconds`."""
    when = time.time() - seconds
    for entry in list(directory.iterdir()) + [directory]:
        os.utime(entry, (when, when), follow_symlinks=False)


@pytest.mark.parametrize(("text", "seconds"), [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("90s", 90),
                                               ("2w", 14 * 86400), ("1.5h", 5400)])
def test_ages_read_as_slurm_users_write_them(text: str, seconds: float) -> None:
    assert seconds == parse_age(text)


@pytest.mark.parametrize("text", ["7", "d", "7 days", "-1d", "7D", ""])
def test_an_age_without_a_unit_is_refused(text: str) -> None:
    """A bare number (days? seconds?) or any other form is exit 2 naming the option."""
    with pytest.raises(InvalidInput, match=r"--older-than: .* is not a duration such as 7d, 12h, 30m"):
        parse_age(text)


def test_a_run_goes_only_when_every_shard_is_finished(tmp_path) -> None:
    """A run with one shard still running keeps all its shards; a whole finished run goes with
    its run dir; a lone attempt goes on its own; a shard whose record names a run that is not a
    run id (`../../home`) or not a dir under runs/ stays, and no such path is ever removed."""
    ended = {"outcome": "failed", "reason": "client_failed", "from": "attempt"}

    def row(name: str, run: str | None, effective: dict | None, job_state: str | None) -> dict:
        (tmp_path / name).mkdir(exist_ok=True)
        age(tmp_path / name, 2 * WEEK)
        return {"id": name, "dir": str(tmp_path / name), "run": run, "effective": effective, "job_id": "1",
                "job_state": job_state}

    a, b = "gen-20261201T080000-aaaaaa", "gen-20261201T090000-bbbbbb"
    for run in (a, b):
        (tmp_path / "runs" / run).mkdir(parents=True)
    rows = [row("a-s0", a, ended, "failed"), row("a-s1", a, None, "running"),
            row("b-s0", b, ended, "completed"), row("b-s1", b, ended, "timeout"), row("c", None, ended, "failed"),
            row("d-s0", "../../home", ended, "failed"), row("e-s0", "gen-20261201T100000-eeeeee", ended, "failed")]
    chosen = plan_removal(tmp_path, rows, time.time(), WEEK)
    assert (["b-s0", "b-s1", "c"], [str(tmp_path / "runs" / b)], ["a-s1"], 4) == (
        [r["id"] for r in chosen["attempts"]], chosen["runs"], chosen["live"], chosen["kept"])


def test_clean_removes_only_old_finished_attempts_and_unused_bundles(fake_slurm, tmp_path, dd_slurm_exe,
                                                                   clean_env) -> None:
    """Four attempts, all unchanged for 8 days but one: done with its job completed (goes), done
    but touched now (stays), still running (stays), staged and never submitted (stays); an old
    bundle nobody links to goes, the one in use stays read-only. --dry-run says the same and removes nothing;
    no dot-named leftovers remain."""
    old = staged(tmp_path, "1000")
    recent = staged(tmp_path, "1001")
    running = staged(tmp_path, "1002")
    never = staged(tmp_path)
    for attempt, job in ((old, "1000"), (recent, "1001")):
        journal_to(attempt, "verified", "preflight", "deploying", "ready", "client", "finalize", "cleanup", "done",
                   outcome="succeeded", reason="ok")
        fake_job(fake_slurm, job, state="COMPLETED", exit=0)
    journal_to(running, "verified", "preflight", "deploying", "ready", "client")
    fake_job(fake_slurm, "1002", state="RUNNING")
    unused = tmp_path / "ws" / "bundles" / "0123abcd"
    (unused / "lib").mkdir(parents=True)
    (unused / "lib" / "x.py").write_text("")
    for path in (unused / "lib", unused):
        path.chmod(0o555)
    for attempt in (old, running, never):
        age(attempt, 8 * 86400)
    env = {**clean_env, "DD_SLURM_BIN_DIR": str(fake_slurm.bin_dir)}

    def clean(*extra: str) -> dict:
        done = subprocess.run(dd_slurm_exe + ["clean", "-w", str(tmp_path / "ws"), "--older-than", "7d", "--json",
                                              *extra], env=env, capture_output=True, text=True, timeout=60)
        assert 0 == done.returncode, done.stderr
        return json.loads(done.stdout)

    before = sorted(p.name for p in (tmp_path / "ws").rglob("*"))
    dry = clean("--dry-run")
    assert ([old.name], [str(unused)], 3, [running.name, never.name]) == (
        dry["attempts"], dry["bundles"], dry["kept"], sorted(dry["live"], key=[running.name, never.name].index))
    assert before == sorted(p.name for p in (tmp_path / "ws").rglob("*"))
    done = clean()
    assert (dry["attempts"], dry["bundles"]) == (done["attempts"], done["bundles"])
    assert sorted([recent.name, running.name, never.name]) == sorted(p.name for p in (tmp_path / "ws" / "attempts").iterdir()
                                                                     if not p.name.startswith("."))
    in_use = (recent / "bundle").resolve()
    assert ([in_use.name], 0o555) == ([p.name for p in (tmp_path / "ws" / "bundles").iterdir()],
                                      in_use.stat().st_mode & 0o777)  # the removed attempt's link was not followed


def test_a_symlinked_bundle_is_unlinked_never_followed(tmp_path) -> None:
    """A link in bundles/ (or where a removal was left half done) goes as a link: the directory
    it names keeps its files and its mode."""
    from dd_slurm.control.clean import remove_tree

    target = tmp_path / "precious"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "f").write_text("x")
    target.chmod(0o555)
    (tmp_path / "bundles").mkdir()
    (tmp_path / "bundles" / "linked").symlink_to(target)
    remove_tree(tmp_path / "bundles" / "linked")
    assert ([], True, 0o555) == (list((tmp_path / "bundles").iterdir()), (target / "sub" / "f").exists(),
                                 target.stat().st_mode & 0o777)
