"""The single cleanup: look at what is left, stop only that, verify nothing carrying the attempt's
id survives on any node, and report. Every step runs even when one fails; safe to run again."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Callable, Optional

from dd_slurm.clock import Clock
from dd_slurm.runtime.launch import StepRunner
from dd_slurm.runtime.processes import ProcessTable
from dd_slurm.runtime.stepexec import scan_node
from dd_slurm.store.atomic import write_json_atomic

CLEANUP_NAME = "cleanup.json"
KILL_WAIT_S = 3.0
_JOB_ENDING = re.compile(r"has expired|Expired or invalid job|already completing|Job/step already|Invalid job id")


class Cleanup:
    def __init__(self, attempt_dir: Path, table: ProcessTable, runner: Optional[StepRunner], clock: Clock,
                 grace_s: float, nodes: tuple[str, ...], attempt_id: str,
                 signal_step: Callable[[str, str], bool], finish_readiness: Callable[[], None]) -> None:
        self.path = Path(attempt_dir) / CLEANUP_NAME
        self.table, self.runner, self.clock, self.grace_s = table, runner, clock, grace_s
        self.nodes, self.attempt_id = nodes, attempt_id
        self.signal_step, self.finish_readiness = signal_step, finish_readiness

    def run(self, phases: list[list[str]], outcome: str, reason: str) -> dict:
        started = self.clock.monotonic()
        report = {"runs": self._previous_runs() + 1, "outcome": outcome, "reason": reason, "processes": [],
                  "leftovers_found": [], "leftovers_killed": [], "leftovers_after": [], "problems": []}
        before = {name: self.table.poll(name) for name in self.table.procs}
        for phase in phases:
            self._guarded(report, f"stopping {', '.join(phase)}", lambda p=phase: self._stop(p, report))
        self._guarded(report, "leftover scan", lambda: self._scan(report))
        self._guarded(report, "readiness record", self.finish_readiness)
        self._guarded(report, "process report", lambda: report.__setitem__(
            "processes", [self._describe(name, before.get(name)) for name in self.table.procs]))
        report["seconds"] = round(self.clock.monotonic() - started, 3)
        report["verdict"] = "clean" if not report["leftovers_after"] and not report["problems"] else "attention"
        self._guarded(report, "cleanup report", lambda: write_json_atomic(self.path, report))
        return report

    def _stop(self, names: list[str], report: dict) -> None:
        """SIGTERM through Slurm to each step's task (srun itself would SIGKILL it), wait out the
        grace, then SIGKILL the step and its srun. One process that resists does not stop the rest."""
        live = [n for n in names if n in self.table.procs and self.table.poll(n) is None]
        for name in live:
            self._guarded(report, f"SIGTERM to {name}", lambda n=name: self._term(n))
        deadline = self.clock.monotonic() + self.grace_s
        for name in live:
            self.table.wait(name, deadline)
        for name in live:
            if self.table.poll(name) is None:
                self._guarded(report, f"SIGKILL to {name}", lambda n=name: self._kill(n))

    def _kill(self, name: str) -> None:
        try:
            self.signal_step(name, "KILL")
        finally:
            self.table.signal_group(name, signal.SIGKILL)
            self.table.wait(name, self.clock.monotonic() + KILL_WAIT_S)

    def _term(self, name: str) -> None:
        if not self.signal_step(name, "TERM"):
            self.table.signal_group(name, signal.SIGTERM)
        self.table.procs[name].stop = "sigterm"

    def _scan(self, report: dict) -> None:
        if self.runner is None or not self.nodes:
            answers, problem = self._scan_here(report, "no allocation to scan through"), None
        else:
            answers, problem = self.runner.on_nodes(self.nodes, ["_scan", self.attempt_id, "--kill"], "scan-kill", 30)
        if problem and _JOB_ENDING.search(problem):
            answers = self._scan_here(report, "the job is ending, so Slurm's teardown stops every step on "
                                              f"{', '.join(self.nodes)}; the batch node was scanned directly")
            problem = None
        if problem:
            report["problems"].append(problem)
        for node, answer in sorted(answers.items()):
            report["leftovers_found"] += [{**p, "node": node} for p in answer["found"]]
            report["leftovers_killed"] += [{"pid": pid, "node": node} for pid in answer["killed"]]
        if answers and any(a["found"] for a in answers.values()):
            self.clock.sleep(0.2)
            after, problem = self.runner.on_nodes(self.nodes, ["_scan", self.attempt_id], "scan-verify", 30)
            report["leftovers_after"] = [{**p, "node": n} for n, a in sorted(after.items()) for p in a["found"]]
            if problem:
                report["problems"].append(problem)
        missing = sorted(set(self.nodes) - set(answers))
        if missing and not report.get("notes"):
            report["problems"].append(f"nodes that did not answer the leftover scan: {', '.join(missing)}")

    def _scan_here(self, report: dict, note: str) -> dict[str, dict]:
        """Scan (and clear) the node this supervisor runs on, without Slurm."""
        report.setdefault("notes", []).append(note)
        answer = scan_node(self.attempt_id, kill=True)
        if answer["found"]:
            self.clock.sleep(0.2)
            report["leftovers_after"] += [{**p, "node": answer["node"]} for p in scan_node(self.attempt_id, False)["found"]]
        return {answer["node"]: answer}

    def _describe(self, name: str, before: Optional[int]) -> dict:
        tracked = self.table.procs[name]
        remote = self.runner.started(name) if self.runner else None
        if before is not None:
            how = f"exited {before} before cleanup"
        elif tracked.stop == "sigkill":
            how = f"killed (SIGKILL) after {self.grace_s:g}s grace"
        elif tracked.stop == "sigterm":
            how = f"stopped by SIGTERM (exit {tracked.exit_code})"
        else:
            how = f"exited {tracked.exit_code}"
        return {"name": name, "how": how, "exit_code": tracked.exit_code, "pid": tracked.pid, "node": tracked.node,
                "remote": {k: remote.get(k) for k in ("node", "pid", "step_id")} if remote else None}

    def _previous_runs(self) -> int:
        try:
            return int(json.loads(self.path.read_text()).get("runs", 0))
        except (OSError, ValueError):
            return 0

    @staticmethod
    def _guarded(report: dict, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception as err:  # noqa: BLE001 - cleanup records and goes on
            report["problems"].append(f"{what}: {type(err).__name__}: {err}")
