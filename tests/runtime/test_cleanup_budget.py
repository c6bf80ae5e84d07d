"""Cleanup within its budget, and leftovers found honestly."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from dd_slurm.runtime.budget import cleanup_budget, parse_end_time, parse_killwait
from tests.runtime.harness import no_leftovers, outcome, plan_data, read, run

BUDGETS = [  # (reason, grace, end time from now, KillWait, expected seconds)
    ("sigterm", 5, None, 5.0, 4.0),  # scancel / time limit: KillWait is what is left
    ("sigterm", 5, 600, 30.0, 29.0),
    ("client_failed", 5, None, None, 30.0),  # job end unknown: grace + allowance
    ("client_failed", 60, 10, 5.0, 14.0),  # the job ends soon: its end + KillWait
    ("pre_timeout_signal", 5, 30, 5.0, 30.0),
    ("client_failed", 5, -3, None, 4.0),  # already past its end: KillWait (unknown: 5 s)
    ("sigterm", 0, None, 1.0, 1.0),  # never less than a second
]


@pytest.mark.parametrize("reason, grace, end_in, killwait, expected", BUDGETS)
def test_cleanup_budget(reason, grace, end_in, killwait, expected) -> None:
    """One deadline from the job's end, Slurm's KillWait and the grace."""
    budget = cleanup_budget(reason, grace, 1000.0, 50.0, None if end_in is None else 1000.0 + end_in, killwait)
    assert (expected, 50.0 + expected) == (budget.seconds, budget.deadline)


def test_scontrol_answers_parse() -> None:
    """EndTime of `scontrol show job -o` (local time) and KillWait of `scontrol show config`."""
    line = "JobId=14 JobName=x JobState=RUNNING TimeLimit=00:02:00 EndTime=2026-12-01T08:32:39 Partition=debug"
    assert time.mktime((2026, 12, 1, 8, 32, 39, 0, 0, -1)) == parse_end_time(line)
    assert (None, 5.0) == (parse_end_time("EndTime=Unknown"), parse_killwait("KillWait                = 5 sec\n"))


@pytest.mark.timeout(120)
def test_cleanup_with_a_hanging_controller_finishes_and_reports_within_its_budget(tmp_path, fake_slurm) -> None:
    """scancel and every scan srun (to the second node: the supervisor's own is scanned in-process)
    hang for a minute; the job's end time has passed, so KillWait (5 s here) is all cleanup has.
    It stops the servers anyway (SIGTERM to their sruns), writes its report within the budget,
    records what it could not do, and leaves nothing running."""
    data = plan_data("replicas")
    data["deployments"][0]["argv"] += ["--ignore-sigterm-s", "30"]
    data["client"]["argv"] += ["--exit-code", "3"]
    fake_slurm.add_fault("scancel", hang=60, times=20)
    for name in ("scan-record", "scan-kill", "scan-verify"):
        fake_slurm.add_fault("srun", hang=60, match=f"--job-name={name}")
    attempt, staged = run(tmp_path, fake_slurm, data, SLURM_JOB_END_TIME=str(int(time.time())))
    report = read(staged.attempt_dir, "cleanup.json")
    entries = [json.loads(line) for line in (staged.attempt_dir / "journal.jsonl").read_text().splitlines()]
    took = entries[-1]["ts"] - next(e["ts"] for e in entries if e["to"] == "cleanup")
    assert ("failed", "client_failed") == outcome(staged.attempt_dir)
    assert (True, 4.0) == (report["finished"], report["budget_s"])
    assert took <= report["budget_s"] + 0.5, (took, report)
    assert "attention" == report["verdict"] and report["problems"]
    assert [] == no_leftovers(staged.attempt_id)


ESCAPING_SERVER = ["/usr/bin/python3", "{attempt_dir}/bundle/lib/dd_slurm/testing/fault_server.py", "--host", "{host}",
                   "--port", "{port}", "--escape-pidfile", "{attempt_dir}/escaped.pid"]


WRITE_THREE = ["/usr/bin/python3", "-c", "open('{results_dir}/records.jsonl', 'w').write('{{}}\\n' * 3)"]


def _alive(pid: int) -> bool:
    """Running (a zombie whose parent never reaps it is dead, whatever kill(pid, 0) says)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_a_daemon_that_escaped_its_step_is_found_and_killed(tmp_path, fake_slurm) -> None:
    """The server double-forks `setsid env -i sleep 1000`: no attempt id in its environment, its
    own session. The scan finds it in the step's recorded process tree, kills it and says so, and
    the report lists the methods that ran on the node."""
    data = plan_data("single-node")
    data["deployments"][0]["argv"] = ESCAPING_SERVER
    data["client"].update(argv=WRITE_THREE, preflight_argv=None)
    attempt, staged = run(tmp_path, fake_slurm, data)
    pid = int((staged.attempt_dir / "escaped.pid").read_text())
    try:
        report = read(staged.attempt_dir, "cleanup.json")
        found = {p["pid"]: p for p in report["leftovers_found"]}
        assert ("succeeded", False) == (attempt.outcome, _alive(pid))
        assert ("sleep 1000", ["process_tree"]) == (found[pid]["cmdline"], found[pid]["seen_by"])
        assert ([pid], [], "clean") == ([p["pid"] for p in report["leftovers_killed"]], report["leftovers_after"],
                                        report["verdict"])
        methods = report["methods"]["127.0.2.1"]
        assert ("ran", "ran", "ran") == (methods["environment"], methods["process_tree"], methods["session"])
        assert methods["cgroup"].startswith(("ran", "unavailable"))
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_the_supervisors_own_node_is_scanned_in_process_and_the_others_by_one_step(tmp_path, fake_slurm) -> None:
    """A one-node attempt's cleanup runs no scan step at all (its node is answered in-process);
    a two-node attempt's scans run as steps on the second node only. Both report both methods."""
    _attempt, one = run(tmp_path / "one", fake_slurm, plan_data("single-node"))
    _attempt, two = run(tmp_path / "two", fake_slurm, plan_data("replicas"))
    scans = {name: sorted(p.name for p in (s.attempt_dir / "logs").glob("scan-*.log")) for name, s in
             (("one", one), ("two", two))}
    scanned_by_step = {json.loads(line)["node"] for line in (two.attempt_dir / "logs" / "scan-kill.log").read_text()
                       .splitlines() if line.startswith("{")}
    methods = {name: sorted(read(s.attempt_dir, "cleanup.json")["methods"]) for name, s in (("one", one), ("two", two))}
    assert ({"one": [], "two": ["scan-kill.log", "scan-record.log"]}, {"127.0.2.2"},
            {"one": ["127.0.2.1"], "two": ["127.0.2.1", "127.0.2.2"]}) == (scans, scanned_by_step, methods)
