"""`dd-slurm run` / `advance`: one supervisor process driving one attempt's machine."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from dd_slurm.clock import Clock
from dd_slurm.machine import table
from dd_slurm.machine.attempt import Attempt
from dd_slurm.machine.journal import Journal
from dd_slurm.runtime.actions import RuntimeActions
from dd_slurm.runtime.budget import JobFacts
from dd_slurm.runtime.node.procfs import start_time
from dd_slurm.runtime.session import Session
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.supervision import Holder, SupervisionRefused, SupervisorLock, job_live_via
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.timeline import write_timeline

# Where `advance --until` may stop: no process of the attempt runs in these states.
SAFE_STOPS = tuple(s for s in table.UNTIL_STATES if s not in table.LIVE_STATES)
FACTS_DELAY_S = 1.5  # the job's end time and KillWait are fetched once start-up is under way


def check_may_supervise(environ: Mapping[str, str], until: Optional[str]) -> None:
    """Refusals that leave the attempt untouched (exit 2): outside an allocation, or an --until
    that would leave the attempt's processes running with nobody supervising them."""
    if not environ.get("SLURM_JOB_ID") or not (environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")):
        raise SupervisionRefused("not inside a Slurm allocation (SLURM_JOB_ID/SLURM_JOB_NODELIST unset): the "
                                 "attempt is supervised only from its job; nothing was changed")
    if until is not None and until not in SAFE_STOPS:
        raise SupervisionRefused(f"--until {until}: the attempt's processes would keep running with no supervisor; "
                                 f"stop at one of {', '.join(SAFE_STOPS)}")


def run_command(attempt_dir: str, bundle_digest: Optional[str], plan_digest: Optional[str],
                **kwargs: Any) -> tuple[int, dict]:
    """`dd-slurm run DIR`: its exit code (0 only when the attempt succeeded) and the attempt's summary."""
    from dd_slurm.errors import EXIT_ATTEMPT_FAILED
    from dd_slurm.store.view import attempt_summary

    directory, attempt = run_in_dir(attempt_dir, bundle_digest, plan_digest, **kwargs)
    return (0 if attempt.outcome == "succeeded" else EXIT_ATTEMPT_FAILED), attempt_summary(directory)


def run_in_dir(attempt_dir: str, bundle_digest: Optional[str], plan_digest: Optional[str],
               **kwargs: Any) -> tuple[Path, Attempt]:
    """`run`/`advance` of DIR (a run dir, which an array's entrypoint passes, means this task's
    shard, by SLURM_ARRAY_TASK_ID), with the digests given or else the attempt record's."""
    from dd_slurm.store.run_shards import select_shard
    from dd_slurm.store.view import attempt_dir as checked_dir

    directory = checked_dir(str(select_shard(attempt_dir, os.environ)))
    return directory, run_attempt(directory, *_digests(str(directory), bundle_digest, plan_digest), **kwargs)


def _digests(attempt_dir: str, bundle_digest: Optional[str], plan_digest: Optional[str]) -> tuple[str, str]:
    from dd_slurm.store.attempt_record import read_record

    if bundle_digest and plan_digest:
        return bundle_digest, plan_digest
    record = read_record(attempt_dir)
    return bundle_digest or record["bundle_digest"], plan_digest or record["plan_digest"]


def run_attempt(attempt_dir: Path, bundle_digest: str, plan_digest: str, until: Optional[str] = None,
                environ: Mapping[str, str] = os.environ, early_signals: Optional[list[int]] = None,
                command: str = "run", verified_bundle: Optional[tuple[str, str]] = None) -> Attempt:
    """`verified_bundle`: (bundle dir, digest) the bundle's entry point verified in this process."""
    clock = Clock()
    commands = SlurmCommands(clock, environ.get("DD_SLURM_BIN_DIR") or None, environ, timeout_s=20)
    gate = SignalGate(early_signals, lambda: commands.reached_time_limit(environ.get("SLURM_JOB_ID", ""))).install()
    try:
        check_may_supervise(environ, until)
        lock = SupervisorLock(Path(attempt_dir), Holder.me(command, environ), job_live_via(
            lambda job: _observe(job, commands, clock)))
        lock.acquire()
        try:
            return _supervise(attempt_dir, bundle_digest, plan_digest, until, environ, clock, gate, commands,
                              verified_bundle)
        finally:
            lock.release()
    finally:
        gate.uninstall()


def _supervise(attempt_dir: Path, bundle_digest: str, plan_digest: str, until: Optional[str],
               environ: Mapping[str, str], clock: Clock, gate: SignalGate, commands: SlurmCommands,
               verified_bundle: Optional[tuple[str, str]] = None) -> Attempt:
    session = Session(attempt_dir=Path(attempt_dir), bundle_digest=bundle_digest, plan_digest=plan_digest,
                      environ=environ, clock=clock, gate=gate, commands=commands)
    session.job_facts = JobFacts(environ, commands.bounded(10.0), environ.get("SLURM_JOB_ID", ""),
                                 FACTS_DELAY_S)
    write_supervisor_record(session.dir, "running")
    try:
        actions = RuntimeActions(session, verified_bundle)
        attempt = Attempt(actions, Journal(session.dir, clock))
        actions.replica_event = attempt.replica_event  # a replica's loss, ejection, readmission: journal events
        if attempt.state in table.LIVE_STATES:  # a gone supervisor's processes cannot be adopted
            attempt.fire(table.FAILURE_TRIGGER, outcome="failed", reason="supervisor_restarted",
                         detail=f"a new supervisor found the attempt in {attempt.state}; its processes are not adoptable")
        attempt.advance(until)
        for reason in gate.unheeded():  # journaled as ignored: cleanup was not restarted or aborted
            attempt.fire(table.FAILURE_TRIGGER, reason=reason)
        if attempt.state == table.TERMINAL:
            write_timeline(session.dir)  # timeline.md: where the time went (never raises)
        return attempt
    finally:
        write_supervisor_record(session.dir, "exited")


def _observe(job_id: str, commands: SlurmCommands, clock: Clock):
    from dd_slurm.scheduler.query import query  # only when a lock holder on another machine must be checked

    return next(iter(query([job_id], commands, clock)), None)


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
    write_json_atomic(attempt_dir / files.SUPERVISOR, {
        "pid": os.getpid(), "state": state, "started_at": process_started_wall(os.getpid()),
        "peak_rss_kib": peak_rss_kib(), "python": sys.version.split()[0], "cpu_s": cpu_seconds()})


def cpu_seconds() -> dict[str, float]:
    """CPU time (user + system) of this supervisor, and of the children it has reaped so far with
    theirs (sruns; on fake Slurm also everything its steps ran on this machine)."""
    times = os.times()
    return {"self": round(times.user + times.system, 3),
            "children": round(times.children_user + times.children_system, 3)}
