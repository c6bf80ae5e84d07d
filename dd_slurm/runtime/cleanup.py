"""The single cleanup: look at what is left, stop only that, verify nothing of the attempt survives
on any node, and report. Every step runs even when one fails; safe to run again.

It runs against one deadline (`Budget`: before Slurm's SIGKILL): every scancel and srun it makes is
bounded by what is left, the steps of one phase are stopped together (one scancel per signal), and
a report is on disk from the start (marked unfinished) and rewritten at the end."""

from __future__ import annotations

import functools
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import attrs

from dd_slurm.clock import Clock
from dd_slurm.errors import AttemptDirError
from dd_slurm.runtime import gateway_step
from dd_slurm.runtime.budget import STOP_ALLOWANCE_S, Budget
from dd_slurm.runtime.node.leftover_scan import record_trees, scan_node
from dd_slurm.runtime.process_table import ProcessTable
from dd_slurm.runtime.step_runner import StepRunner
from dd_slurm.store import attempt_files as files
from dd_slurm.store.cleanup_report import (
    CleanupReport,
    Killed,
    Leftover,
    ProcessEnd,
    RemoteStep,
    ReportDraft,
    read_report,
    write_report,
)

KILL_WAIT_S = 3.0
SCAN_S = 30.0
AFTER_GRACE_S = 2.0  # of the budget kept back from the grace: SIGKILL, the scan, the report
_JOB_ENDING = re.compile(r"has expired|Expired or invalid job|already completing|Job/step already|Invalid job id")


def note_containers(report: ReportDraft, node: str, answer: dict) -> None:
    """enroot containers the scan found: removed ones are noted, any other is a problem."""
    found, removed = answer.get("containers_found") or [], answer.get("containers_removed") or []
    if removed:
        report.notes.append(f"enroot containers removed on {node}: {', '.join(removed)}")
    left = [n for n in found if n not in removed]
    if left:
        report.problems.append(f"enroot containers left on {node}: {', '.join(left)}")


def leftover(found: dict, node: str) -> Leftover:
    """One process of a node's scan answer, as the report records it."""
    return Leftover(pid=found["pid"], node=node, start_time=found["start_time"], role=found["role"],
                    cmdline=found["cmdline"], seen_by=tuple(found["seen_by"]))


@attrs.frozen
class Drain:
    """At a stop while the client runs, before anything is stopped: the gateway admits nothing new
    and its in-flight requests finish (`drain_s`), then the client gets `stop_signal` and
    `stop_grace_s` to seal what it wrote."""

    drain_s: float
    stop_signal: str
    stop_grace_s: float
    gateway: str = "gateway"
    client: str = "client"

    @property
    def seconds(self) -> float:
        return self.drain_s + self.stop_grace_s


STOP_REASONS = ("sigterm", "sigint", "pre_timeout_signal", "time_limit")  # the stops a drain answers


def drain_for(prepared: object, table: ProcessTable, reason: str) -> Optional[Drain]:
    """A stop (a signal, the time limit, a cancel) while the client runs: drain, then let the
    client seal its output. None otherwise, or when preparation never finished."""
    if prepared is None or reason not in STOP_REASONS or "client" not in table.procs or table.poll("client") is not None:
        return None
    plan = prepared.plan  # type: ignore[attr-defined]
    return Drain(drain_s=plan.gateway.drain_s, stop_signal=plan.client.stop_signal,
                 stop_grace_s=plan.client.stop_grace_s)


def _default_budget(cleanup: Cleanup) -> Budget:
    return Budget(cleanup.clock.monotonic() + cleanup.grace_s + STOP_ALLOWANCE_S, cleanup.grace_s + STOP_ALLOWANCE_S,
                  "default: grace + allowance")


@attrs.frozen(kw_only=True, eq=False)
class Cleanup:
    """One cleanup of one attempt. `runner` is None and `nodes` empty when preparation never
    built them: what this process started is still stopped, and this node scanned."""

    dir: Path = attrs.field(alias="attempt_dir", converter=Path)
    table: ProcessTable
    runner: Optional[StepRunner]
    clock: Clock
    grace_s: float
    nodes: tuple[str, ...]
    attempt_id: str
    signal_steps: Callable[..., object]
    finish_readiness: Callable[[], None]
    here: Optional[str] = None  # the supervisor's own node: scanned in-process, without an srun
    budget: Budget = attrs.field(default=attrs.Factory(_default_budget, takes_self=True))

    @property
    def path(self) -> Path:
        return self.dir / files.CLEANUP

    def left(self) -> float:
        return self.budget.left(self.clock.monotonic())

    def run(self, phases: list[list[str]], outcome: str, reason: str, drain: Optional[Drain] = None) -> CleanupReport:
        started = self.clock.monotonic()
        report = ReportDraft(runs=self._previous_runs() + 1, outcome=outcome, reason=reason,
                             budget_s=self.budget.seconds, budget_basis=self.budget.basis)
        self._guarded(report, "cleanup report", functools.partial(self._write, report))
        before = {name: self.table.poll(name) for name in self.table.procs}
        self._guarded(report, "recording process trees", functools.partial(self._record, report))
        if drain is not None:
            self._guarded(report, "draining the gateway", functools.partial(self._drain_gateway, drain, report))
            self._guarded(report, "stopping the client", functools.partial(self._stop_client, drain, report))
        for phase in phases:
            self._guarded(report, f"stopping {', '.join(phase)}", functools.partial(self._stop, phase, report))
        self._guarded(report, "leftover scan", functools.partial(self._scan, report))
        self._guarded(report, "readiness record", self.finish_readiness)
        self._guarded(report, "process report", functools.partial(self._describe_all, report, before))
        report.seconds = round(self.clock.monotonic() - started, 3)
        report.finished = True
        report.verdict = "clean" if not report.leftovers_after and not report.problems else "attention"
        self._guarded(report, "cleanup report", functools.partial(self._write, report))
        return report.freeze()

    def _write(self, report: ReportDraft) -> None:
        write_report(self.path, report.freeze())

    def _stop(self, names: list[str], report: ReportDraft) -> None:
        """SIGTERM through Slurm to every step's task at once, in one scancel (srun itself would
        SIGKILL it); wait out the grace (what the budget allows of it), then SIGKILL what is left,
        again all at once. A scancel that fails or does not answer in time falls back to signalling
        each step's srun group directly, so one stuck controller does not stop the rest."""
        live = [n for n in names if n in self.table.procs and self.table.poll(n) is None]
        if not live:
            return
        self._guarded(report, f"SIGTERM to {', '.join(live)}", lambda: self._term(live))
        grace = max(0.0, min(self.grace_s, self.left() - AFTER_GRACE_S))
        if grace < self.grace_s:
            report.notes.append(f"grace cut to {grace:.1f}s by the cleanup budget")
        left = self.table.wait_all(live, self.clock.monotonic() + grace)
        if left:
            self._guarded(report, f"SIGKILL to {', '.join(left)}", lambda: self._kill(left))

    def _running(self, name: str) -> bool:
        return name in self.table.procs and self.table.poll(name) is None

    def _drain_gateway(self, drain: Drain, report: ReportDraft) -> None:
        """SIGUSR2 to the gateway; wait (what the budget allows of `drain_s`) for its state file to
        say `drained`, or for it to end."""
        if not self._running(drain.gateway) or drain.drain_s <= 0:
            return
        if drain.gateway not in self._signal([drain.gateway], "USR2", self._quick()):
            self.table.signal_group(drain.gateway, signal.SIGUSR2)
        began = self.clock.monotonic()  # at most half of what is left: the client and the stops come after
        deadline = began + max(0.0, min(drain.drain_s, (self.left() - AFTER_GRACE_S) / 2))
        while self.clock.monotonic() < deadline and self._running(drain.gateway):
            if gateway_step.state_of(self.dir).get("state") == "drained":
                report.notes.append(f"gateway drained in {self.clock.monotonic() - began:.1f}s: nothing in flight")
                return
            self.clock.sleep(0.05)
        report.notes.append(f"gateway not drained after {self.clock.monotonic() - began:.1f}s "
                            f"(drain_s {drain.drain_s:g}); requests still in flight are cut")

    def _stop_client(self, drain: Drain, report: ReportDraft) -> None:
        """`stop_signal` to the client, then up to `stop_grace_s` (what the budget allows) for it to
        exit; what it has not sealed by then, the usual stop ends."""
        if not self._running(drain.client):
            return
        sent = drain.stop_signal
        if drain.client not in self._signal([drain.client], sent, self._quick()):
            sent = "TERM" if sent == "INT" else sent  # srun does not pass its first SIGINT on to the task
            self.table.signal_group(drain.client, getattr(signal, f"SIG{sent}"))
            if sent != drain.stop_signal:
                report.notes.append("scancel could not send SIGINT to the client; srun passed SIGTERM instead")
        self.table.procs[drain.client].stop = f"sig{sent.lower()}"
        grace = max(0.0, min(drain.stop_grace_s, (self.left() - AFTER_GRACE_S) / 2))
        if self.table.wait_all([drain.client], self.clock.monotonic() + grace):
            report.notes.append(f"the client did not exit within {grace:.1f}s of SIG{sent}")

    def _quick(self) -> float:
        """A drain's scancel: a slow controller must not take the grace the stops after it need."""
        return max(0.1, min(2.0, self.left() / 4))

    def _signal(self, names: list[str], signal_name: str, timeout_s: Optional[float] = None) -> set[str]:
        """The names signalled through Slurm (`signal_steps(names, signal, timeout_s)` answers them;
        anything else is none), within what is left of the budget."""
        found = self.signal_steps(names, signal_name, timeout_s=timeout_s or max(0.1, self.left() - 0.5))
        return set(found) if isinstance(found, (list, tuple, set)) else set()

    def _kill(self, names: list[str]) -> None:
        try:
            self._signal(names, "KILL")
        finally:
            for name in names:
                self.table.signal_group(name, signal.SIGKILL)
            self.table.wait_all(names, self.clock.monotonic() + min(KILL_WAIT_S, self.left()))

    def _term(self, names: list[str]) -> None:
        signalled = self._signal(names, "TERM")
        for name in names:
            if name not in signalled:
                self.table.signal_group(name, signal.SIGTERM)
            self.table.procs[name].stop = "sigterm"

    def _record(self, report: ReportDraft) -> None:
        """Before anything is stopped: each node records its steps' process trees and sessions,
        which the leftover scan uses once the steps are gone."""
        if not any(self.table.poll(n) is None for n in self.table.procs):
            return
        if self.runner is None or not self.nodes:
            record_trees(str(self.dir))
            return
        _answers, problem = self._on_nodes(self.runner, ["--record"], "scan-record", min(10.0, self.left() / 4))
        if problem:
            record_trees(str(self.dir))  # at least this node's, without Slurm
            report.notes.append("process trees recorded on the batch node only: " + problem[:200])

    def _scan(self, report: ReportDraft) -> None:
        if self.runner is None or not self.nodes:
            answers, problem = self._scan_here(report, "no allocation to scan through"), None
        else:
            answers, problem = self._on_nodes(self.runner, ["--kill"], "scan-kill", min(SCAN_S, self.left() - 0.5))
        if problem and _JOB_ENDING.search(problem):
            answers = self._scan_here(report, "the job is ending, so Slurm's teardown stops every step on "
                                              f"{', '.join(self.nodes)}; the batch node was scanned directly")
            problem = None
        if problem:
            report.problems.append(problem)
        for node, answer in sorted(answers.items()):
            report.methods[node] = answer.get("methods", {"environment": "ran"})
            report.leftovers_found += [leftover(p, node) for p in answer["found"]]
            report.leftovers_killed += [Killed(pid=pid, node=node) for pid in answer["killed"]]
            note_containers(report, node, answer)
        if self.runner is not None and answers and any(a["found"] for a in answers.values()):
            self.clock.sleep(0.2)  # without a runner, _scan_here has already looked again
            after, problem = self._on_nodes(self.runner, [], "scan-verify", max(0.5, min(SCAN_S, self.left() - 0.5)))
            report.leftovers_after = [leftover(p, n) for n, a in sorted(after.items()) for p in a["found"]]
            if problem:
                report.problems.append(problem)
        missing = sorted(set(self.nodes) - set(answers))
        if missing and not report.notes:
            report.problems.append(f"nodes that did not answer the leftover scan: {', '.join(missing)}")

    def _on_nodes(self, runner: StepRunner, mode: list[str], name: str,
                  timeout_s: float) -> tuple[dict[str, dict], Optional[str]]:
        """The scan command's answers from every node: one srun step on the others (through
        `runner`), this node's worked out in-process (as the node probe's is); a problem if the
        step had one."""
        others = tuple(n for n in self.nodes if n != self.here)
        answers, problem = runner.on_nodes(others, ["_scan", self.attempt_id, "--dir", str(self.dir), *mode],
                                                name, timeout_s) if others else ({}, None)
        if self.here in self.nodes:
            answers[self.here] = record_trees(str(self.dir), self.here) if "--record" in mode else \
                scan_node(self.attempt_id, "--kill" in mode, str(self.dir), self.here)
        return answers, problem

    def _scan_here(self, report: ReportDraft, note: str) -> dict[str, dict]:
        """Scan (and clear) the node this supervisor runs on, without Slurm."""
        report.notes.append(note)
        answer = scan_node(self.attempt_id, True, str(self.dir))
        report.methods[answer["node"]] = answer["methods"]
        if answer["found"]:
            self.clock.sleep(0.2)
            report.leftovers_after += [leftover(p, answer["node"])
                                       for p in scan_node(self.attempt_id, False, str(self.dir))["found"]]
        return {answer["node"]: answer}

    def _describe_all(self, report: ReportDraft, before: dict[str, Optional[int]]) -> None:
        report.processes = [self._describe(name, before.get(name)) for name in self.table.procs]

    def _describe(self, name: str, before: Optional[int]) -> ProcessEnd:
        tracked = self.table.procs[name]
        remote = self.runner.started(name) if self.runner else None
        if before is not None:
            how = f"exited {before} before cleanup"
        elif tracked.stop == "sigkill":
            how = f"killed (SIGKILL) after {self.grace_s:g}s grace"
        elif tracked.stop.startswith("sig"):
            how = f"stopped by {tracked.stop.upper()} (exit {tracked.exit_code})"
        else:
            how = f"exited {tracked.exit_code}"
        return ProcessEnd(name=name, how=how, exit_code=tracked.exit_code, pid=tracked.pid, node=tracked.node,
                          remote=RemoteStep(node=remote.get("node"), pid=remote.get("pid"),
                                            step_id=remote.get("step_id")) if remote else None)

    def _previous_runs(self) -> int:
        try:
            previous = read_report(self.path)
        except AttemptDirError:
            return 0
        return previous.runs if previous is not None else 0

    @staticmethod
    def _guarded(report: ReportDraft, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as err:
            report.problems.append(f"{what}: {type(err).__name__}: {err}")
