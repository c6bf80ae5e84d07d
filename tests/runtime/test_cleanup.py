"""Cleanup fails safe: what it cannot do it records, and it goes on; running it again is harmless."""

from __future__ import annotations

import json
import shutil
import sys

from dd_slurm.clock import Clock
from dd_slurm.runtime.cleanup import Cleanup
from dd_slurm.runtime.process_table import ProcessTable
from dd_slurm.runtime.run import run_attempt
from dd_slurm.store.cleanup_report import read_report
from tests.runtime.harness import NODES as FAKE_NODES
from tests.runtime.harness import allocation_env, fake_step_runner, journal, no_leftovers, plan_data, stage_plan

NODES = ("127.0.2.1", "127.0.2.2")


def _setup(tmp_path, fake_slurm):
    staged = stage_plan(tmp_path, plan_data("single-node"))
    clock = Clock()
    table = ProcessTable(staged.attempt_dir, clock)
    runner = fake_step_runner(staged, table, clock, fake_slurm.bin_dir)
    env = {"PATH": "/usr/bin:/bin", "DD_SLURM_ATTEMPT_ID": staged.attempt_id, "DD_SLURM_ROLE": "server"}
    table.spawn("server", [sys.executable, "-c", "import time; time.sleep(60)"], env, staged.attempt_dir / "logs" / "s.log")
    return staged, clock, table, runner


def _cleanup(staged, clock, table, runner, signal_steps=lambda names, sig, timeout_s=None: []):
    return Cleanup(attempt_dir=staged.attempt_dir, table=table, runner=runner, clock=clock, grace_s=0.5, nodes=NODES,
                   attempt_id=staged.attempt_id, signal_steps=signal_steps, finish_readiness=lambda: None)


def test_a_process_that_cannot_be_signalled_is_recorded_and_cleared_by_the_scan(tmp_path, fake_slurm) -> None:
    """Signalling through Slurm fails: cleanup records the problem, still SIGKILLs the process
    group itself, finishes the scan, and leaves nothing running."""
    staged, clock, table, runner = _setup(tmp_path, fake_slurm)

    def refuse(name, sig, timeout_s=None):
        raise PermissionError(f"scancel refused {sig} for {name}")

    report = _cleanup(staged, clock, table, runner, refuse).run([["server"]], "failed", "test")
    assert any("SIGTERM to server" in p for p in report.problems)
    assert "attention" == report.verdict
    assert [] == no_leftovers(staged.attempt_id)


def test_a_node_that_does_not_answer_is_recorded(tmp_path, fake_slurm) -> None:
    """The leftover scan cannot reach a node: the report says so, and cleanup still finishes
    (the report is written, the readiness hook runs)."""
    staged, clock, table, runner = _setup(tmp_path, fake_slurm)
    fake_slurm.add_fault("srun", exit=1, match="--job-name=scan-kill",
                         stderr="srun: error: Task launch for StepId=4242.3 failed on node n2: "
                                "Communication connection failure\n")
    finished = []
    report = Cleanup(attempt_dir=staged.attempt_dir, table=table, runner=runner, clock=clock, grace_s=0.5, nodes=NODES,
                     attempt_id=staged.attempt_id, signal_steps=lambda n, s, timeout_s=None: [],
                     finish_readiness=lambda: finished.append(True)).run([["server"]], "failed", "test")
    assert any("Communication connection failure" in p for p in report.problems)
    assert ([True], "attention") == (finished, report.verdict)
    assert report == read_report(staged.attempt_dir / "cleanup.json")


def test_a_log_dir_that_became_unusable_is_recorded(tmp_path, fake_slurm) -> None:
    """logs/ replaced by a file mid-run: the scan cannot log, cleanup records it, stops the
    process anyway and writes its report."""
    staged, clock, table, runner = _setup(tmp_path, fake_slurm)
    shutil.rmtree(staged.attempt_dir / "logs")
    (staged.attempt_dir / "logs").write_text("not a directory")
    report = _cleanup(staged, clock, table, runner).run([["server"]], "failed", "test")
    assert any("leftover scan" in p for p in report.problems)
    assert "stopped by SIGTERM (exit -15)" == report.processes[0].how
    assert (staged.attempt_dir / "cleanup.json").exists()


def test_running_cleanup_again_stops_nothing_new(tmp_path, fake_slurm) -> None:
    """In the same supervisor (its table knows the server it stopped), a second run finds nothing
    alive, signals nothing (no scancel; the first run's did signal), and counts itself."""
    staged, clock, table, runner = _setup(tmp_path, fake_slurm)
    signalled: list[tuple] = []

    def record(names, sig, timeout_s=None):
        signalled.append((tuple(names), sig))
        return []

    first = _cleanup(staged, clock, table, runner, record).run([["server"]], "failed", "test")
    by_first = list(signalled)
    second = _cleanup(staged, clock, table, runner, record).run([["server"]], "failed", "test")
    assert ([(("server",), "TERM")], by_first) == (by_first, signalled)
    assert (1, 2) == (first.runs, second.runs)
    assert "exited -15 before cleanup" == second.processes[0].how
    assert ("clean", ()) == (second.verdict, second.leftovers_found)


def test_cleanup_after_a_failed_preparation_still_runs_and_reports(tmp_path, fake_slurm) -> None:
    """A supervisor resumes an attempt left at `verified` in a job where srun cannot be found:
    preparing its session fails (`srun_missing`), and cleanup, with no step runner and no nodes,
    still runs (this node scanned directly), writes its finished report, makes the readiness
    record the first run left terminal (replicas stopped, endpoints withdrawn) and ends the attempt."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    env = allocation_env(fake_slurm.bin_dir, FAKE_NODES[:1], 1)
    first = run_attempt(staged.attempt_dir, staged.bundle_digest, staged.plan_digest, until="verified", environ=env)
    assert ("verified", None) == (first.state, read_report(staged.attempt_dir / "cleanup.json"))
    no_srun = tmp_path / "no-srun"
    no_srun.mkdir()
    resumed = run_attempt(staged.attempt_dir, staged.bundle_digest, staged.plan_digest,
                          environ={**env, "DD_SLURM_BIN_DIR": str(no_srun)}, command="advance")
    report = read_report(staged.attempt_dir / "cleanup.json")
    assert ("done", "failed", "srun_missing") == (resumed.state, resumed.outcome, resumed.reason)
    assert [("preflight", "cleanup", "srun_missing"), ("cleanup", "done", "srun_missing")] == \
        journal(staged.attempt_dir)[-2:]
    assert (1, True, "clean", ("no allocation to scan through",), ()) == (
        report.runs, report.finished, report.verdict, report.notes, report.problems)
    readiness = json.loads((staged.attempt_dir / "readiness.json").read_text())
    assert ("withdrawn", {"stopped"}) == (readiness["endpoints"], {d["state"] for d in readiness["deployments"].values()})
    assert [] == no_leftovers(staged.attempt_id)
