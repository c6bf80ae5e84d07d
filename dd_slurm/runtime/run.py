"""`dd-slurm run` / `advance`: one supervisor process driving one attempt's machine."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Mapping, Optional

from dd_slurm.clock import Clock
from dd_slurm.machine import table as T
from dd_slurm.machine.attempt import Attempt
from dd_slurm.machine.journal import Journal
from dd_slurm.runtime.actions import RuntimeActions
from dd_slurm.runtime.session import Session
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.stepexec import start_time
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.store.atomic import write_json_atomic

SUPERVISOR_NAME = "supervisor.json"

# States whose processes belonged to a supervisor that is gone: they cannot be adopted.
UNSUPERVISED = ("preflight", "deploying", "ready", "client", "finalize")


def run_attempt(attempt_dir: Path, bundle_digest: str, plan_digest: str, until: Optional[str] = None,
                environ: Mapping[str, str] = os.environ) -> Attempt:
    clock = Clock()
    commands = SlurmCommands(clock, environ.get("DD_SLURM_BIN_DIR") or None, environ, timeout_s=20)
    gate = SignalGate(lambda: commands.reached_time_limit(environ.get("SLURM_JOB_ID", ""))).install()
    session = Session(Path(attempt_dir), bundle_digest, plan_digest, environ, clock, gate, commands)
    write_supervisor_record(session.dir, "running")
    try:
        attempt = Attempt(RuntimeActions(session), Journal(session.dir, clock))
        if attempt.state in UNSUPERVISED:
            attempt.fire(T.FAILURE_TRIGGER, outcome="failed", reason="supervisor_restarted",
                         detail=f"a new supervisor found the attempt in {attempt.state}; its processes are not adoptable")
        attempt.advance(until)
        for reason in gate.unheeded():  # journaled as ignored: cleanup was not restarted or aborted
            attempt.fire(T.FAILURE_TRIGGER, reason=reason)
        return attempt
    finally:
        gate.uninstall()
        write_supervisor_record(session.dir, "exited")


def process_started_wall(pid: int) -> Optional[float]:
    """Wall-clock start of a process, so interpreter start-up counts: its start ticks since boot
    against CLOCK_BOOTTIME (/proc/stat's btime is whole seconds, too coarse)."""
    ticks = start_time(pid)
    if ticks is None:
        return None
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))


def peak_rss_kib() -> Optional[int]:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def write_supervisor_record(attempt_dir: Path, state: str) -> None:
    write_json_atomic(attempt_dir / SUPERVISOR_NAME, {
        "pid": os.getpid(), "state": state, "started_at": process_started_wall(os.getpid()),
        "peak_rss_kib": peak_rss_kib(), "python": sys.version.split()[0]})
