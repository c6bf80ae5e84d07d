"""The fault matrix on fake infrastructure: the supervisor runs from the staged bundle as a real
process; signals are real; the fake srun runs steps on this machine."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from dd_slurm.clock import Clock
from dd_slurm.runtime.cleanup import Cleanup
from dd_slurm.runtime.process_table import ProcessTable
from dd_slurm.store.cleanup_report import read_report
from tests.faults.matrix import CELLS, Cell, check_cell_aftermath, wait_for_state
from tests.runtime.harness import NODES, allocation_env, fake_step_runner, no_leftovers, plan_data, stage_plan, supervisor_argv

SIGNALS = {"sigterm": signal.SIGTERM, "sigusr1": signal.SIGUSR1}


def _scancel(fake_slurm, supervisor: subprocess.Popen) -> None:
    """What Slurm does on scancel: SIGTERM to every step's tasks and to the batch script."""
    for pids in fake_slurm.read().get("steps", {}).values():
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    supervisor.send_signal(signal.SIGTERM)


def run_cell(tmp_path, fake_slurm, cell: Cell):
    data = plan_data(cell.plan)
    cell.mutate(data)
    staged = stage_plan(tmp_path, data)
    env = allocation_env(fake_slurm.bin_dir, NODES[: data["job"]["nodes"]], data["job"]["gpus_per_node"])
    if cell.action == "break_launch":
        fake_slurm.add_fault("srun", exit=1, match="--job-name=deploy-small-0",
                             stderr="srun: error: Unable to create step for job 4242: "
                                    "Requested node configuration is not available\n")
    argv = supervisor_argv(staged, data)
    supervisor = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if cell.action in ("sigterm", "sigusr1", "scancel"):
            wait_for_state(staged.attempt_dir, cell.state, 30, time.sleep)
            time.sleep(0.05 if cell.state == "cleanup" else 0.4)
            if cell.action == "scancel":
                _scancel(fake_slurm, supervisor)
            else:
                supervisor.send_signal(SIGNALS[cell.action])
        output, _ = supervisor.communicate(timeout=60)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    return staged, supervisor.returncode, output


@pytest.mark.timeout(90)
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_fault_cell_on_fakes(tmp_path, fake_slurm, cell: Cell) -> None:
    """Each fault in each state ends `done` with its outcome and reason, through cleanup once,
    with a terminal readiness record, every tracked process accounted for, nothing left running,
    and `run` exiting 4."""
    staged, code, output = run_cell(tmp_path, fake_slurm, cell)
    assert (0 if cell.expected == ("succeeded", "ok") else 4) == code, output
    check_cell_aftermath(staged.attempt_dir, cell, no_leftovers(staged.attempt_id))


@pytest.mark.timeout(90)
def test_cleanup_called_twice_does_nothing_new(tmp_path, fake_slurm) -> None:
    """After an attempt whose cleanup had live processes to stop (the client hangs past its
    timeout, its server still serving), a second cleanup from a fresh process (its process table
    empty, as a resumed supervisor's is: the leftover scan is all it has) scans the node through
    a real step, finds no process carrying the attempt's id, signals nothing, raises nothing and
    counts its run."""
    cell = next(c for c in CELLS if c.fault == "client_hangs")
    staged, _code, _ = run_cell(tmp_path, fake_slurm, cell)
    first = read_report(staged.attempt_dir / "cleanup.json")
    assert first is not None
    stopped = sorted(p.name for p in first.processes if "SIG" in p.how)
    assert ["client", "deploy-small-0", "gateway"] == stopped
    signalled = []
    clock = Clock()
    table = ProcessTable(staged.attempt_dir, clock)
    runner = fake_step_runner(staged, table, clock, fake_slurm.bin_dir)
    again = Cleanup(attempt_dir=staged.attempt_dir, table=table, runner=runner, clock=clock, grace_s=1.0,
                    nodes=NODES[:1], attempt_id=staged.attempt_id,
                    signal_steps=lambda names, sig, timeout_s=None: signalled.append((names, sig)) or [],
                    finish_readiness=lambda: None).run([["client"], ["gateway"], ["deploy-small-0"]], "failed", "again")
    assert (first.runs + 1, "clean", (), (), [], ()) == (
        again.runs, again.verdict, again.leftovers_found, again.leftovers_killed, signalled, again.problems)
    assert any(name.startswith("scan") for name in table.procs), f"no scan step ran: {sorted(table.procs)}"
