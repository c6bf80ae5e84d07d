"""One scenario run against any Slurm (fake or real) through dd-slurm's own client, giving the
normalized observations with job ids removed, so the two can be compared."""

from __future__ import annotations

import time
from pathlib import Path

from dd_slurm.clock import Clock
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.scheduler.observe import LagClock, index_rows, observe

CASES = {
    "held": ("sleep 1", ['--hold']),
    "completed": ("exit 0", []),
    "failed": ("exit 3", []),
    "cancelled": ("echo started; sleep 300", []),
    "held-array": ("sleep 1", ['--hold', '--array="1-4%2"']),
}
SETTLED = {"held": "pending", "completed": "completed", "failed": "failed", "cancelled": "running",
           "held-array": "pending"}


def submit_all(commands: SlurmCommands, directory: Path, prefix: str) -> dict[str, str]:
    ids = {}
    for case, (body, extra) in CASES.items():
        script = directory / f"{case}.sh"
        lines = ["#!/bin/bash", f'#SBATCH --job-name="{prefix}{case}"', f'#SBATCH --output="{directory}/{case}.out"',
                 *(f"#SBATCH {d}" for d in extra), body]
        script.write_text("\n".join(lines) + "\n")
        ids[case] = commands.submit(script, prefix + case).job_id
    return ids


def observed(commands: SlurmCommands, ids: dict[str, str], since: float) -> dict[str, list[tuple]]:
    result = commands.query(list(ids.values()), since)  # a reused job id's older rows left out
    sacct = index_rows(result.sacct) if result.sacct is not None else None
    out = {}
    for case, job in ids.items():
        found = observe([job], index_rows(result.squeue), sacct, LagClock(Clock().wall(), 300))
        out[case] = [(o.job_id.replace(job, "J"), o.state, o.terminal, o.exit_code, o.signal, o.reason) for o in found]
    return out


def run_scenario(commands: SlurmCommands, directory: Path, prefix: str,
                 seconds: float = 60) -> tuple[dict[str, list[tuple]], str]:
    """The settled observations, and how accounting recorded the cancelled job's batch step
    (`CANCELLED|0:15`, or `FAILED|15:0`: real 24.11 has recorded either for the same scancel)."""
    since = time.time()
    ids = submit_all(commands, directory, prefix)
    wait_for(commands, ids, since, SETTLED, seconds)
    # RUNNING in the queue comes before the batch script runs (under load, seconds before): a job
    # cancelled in between ends with no signal. The line its script writes says it runs.
    deadline = time.monotonic() + seconds
    while "started" not in read_or_empty(directory / "cancelled.out"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the job to cancel never wrote 'started' within {seconds:g}s")
        time.sleep(0.2)
    commands.cancel(ids["cancelled"])
    batch = batch_row(commands, ids["cancelled"], 3 * seconds)
    settled = dict(SETTLED, cancelled="cancelled")
    need = ("completed", "failed", "cancelled")
    return wait_for(commands, ids, since, settled, seconds, need_sacct=need, signal=batch.endswith(":15")), batch


def batch_row(commands: SlurmCommands, job_id: str, seconds: float) -> str:
    """`State|ExitCode` of the job's `.batch` accounting row, once slurmdbd has its end (the row
    first reads `CANCELLED|0:0`, then how the step ended)."""
    deadline = time.monotonic() + seconds
    while True:
        out = commands.run("sacct", ["--noheader", "--parsable2", f"--jobs={job_id}",
                                     "--format=JobID,JobIDRaw,State,ExitCode,Reason,JobName"]).stdout
        rows = [row for line in out.splitlines() if line.startswith(f"{job_id}.batch|")
                and (row := line.split("|"))[3] != "0:0"]
        if rows:
            return f"{rows[0][2]}|{rows[0][3]}"
        if time.monotonic() > deadline:
            raise AssertionError(f"accounting never recorded {job_id}.batch within {seconds:g}s")
        time.sleep(0.5)


def read_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def wait_for(commands, ids, since, states, seconds, need_sacct=(), signal=True) -> dict[str, list[tuple]]:
    deadline = time.monotonic() + seconds
    while True:
        now = observed(commands, ids, since)
        done = all(all(o[1] == states[c] for o in obs) for c, obs in now.items())
        exit_known = all(now[c][0][3] is not None for c in need_sacct)
        if "cancelled" in need_sacct and signal:  # a batch step recorded `0:15` gives the job its signal
            exit_known = exit_known and now["cancelled"][0][4] == 15
        if done and exit_known:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"scenario did not settle: {now}")
        time.sleep(0.5)
