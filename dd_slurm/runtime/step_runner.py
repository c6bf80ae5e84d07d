"""The one step runner: writes each step's spec, starts it through srun via the process table,
and runs short node commands (probe, leftover scan) on several nodes in one step."""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

import attrs

from dd_slurm.clock import Clock
from dd_slurm.runtime.node.stepexec import RELEASE
from dd_slurm.runtime.process_table import ProcessTable, Tracked
from dd_slurm.runtime.step_specs import StepSpec, node_command_argv, srun_argv
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic


def env_copy(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of the caller's environment mapping, never shared with it."""
    return dict(env)


@attrs.frozen(kw_only=True, eq=False)
class StepRunner:
    """Starts steps through `srun` (the process table launches it) for one job's allocation."""

    table: ProcessTable
    clock: Clock
    dir: Path = attrs.field(alias="attempt_dir", converter=Path)
    srun: str
    job_id: str
    interpreter: list[str]
    entry: str
    srun_env: Mapping[str, str] = attrs.field(converter=env_copy)

    def __attrs_post_init__(self) -> None:
        (self.dir / files.STEPS_DIR).mkdir(exist_ok=True)

    def start(self, spec: StepSpec, passed: Optional[Mapping[str, str]] = None) -> Tracked:
        """`passed` holds the values of `spec.passed` (forwarded variables, the key): they reach
        srun's environment only, and srun carries them by name to the step."""
        spec_path = files.step_spec(self.dir, spec.name)
        write_json_atomic(spec_path, spec.to_json(), durable=False)  # read by the step moments later, never after a crash
        argv = srun_argv(spec, self.srun, self.job_id, self.interpreter, self.entry, str(spec_path))
        return self.table.spawn(spec.name, argv, {**self.srun_env, **(passed or {}), "DD_SLURM_ROLE": spec.name},
                                files.step_log(self.dir, spec.name), str(files.step_started(self.dir, spec.name)),
                                held=spec.held)

    def release(self, names: list[str]) -> None:
        """Let held steps go on (stepexec.await_release); one that is gone is check_alive's to report."""
        for name in names:
            self.table.release(name, RELEASE)

    def withdraw(self, names: list[str], deadline: float) -> list[str]:
        """End held steps that were never released (end of input: each launcher exits 0 having
        started nothing), waiting until the monotonic `deadline`; the names still running."""
        for name in names:
            self.table.release(name, b"")
        return self.table.wait_all(names, deadline)

    def started(self, name: str) -> Optional[dict]:
        """What the on-node launcher recorded (node, pid, step id), or None if it never ran."""
        path = files.step_started(self.dir, name)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def on_nodes(self, nodes: tuple[str, ...], command: list[str], name: str, timeout_s: float,
                 role: str = "scan", gres_gpus: int = 0,
                 passed: Optional[Mapping[str, str]] = None) -> tuple[dict[str, dict], Optional[str]]:
        """Run `entry.py COMMAND` once on each node; per-node JSON answers, and a problem if any.
        `passed` values reach the command through srun's environment, by name."""
        self.start_on_nodes(nodes, command, name, role, gres_gpus, passed)
        return self.node_answers(name, self.clock.monotonic() + timeout_s)

    def start_on_nodes(self, nodes: tuple[str, ...], command: list[str], name: str, role: str = "scan",
                       gres_gpus: int = 0, passed: Optional[Mapping[str, str]] = None) -> Tracked:
        """Start `entry.py COMMAND` once on each node, in one step; `node_answers` collects it."""
        identity = ",".join([f"DD_SLURM_ATTEMPT_ID={self.srun_env['DD_SLURM_ATTEMPT_ID']}", f"DD_SLURM_ROLE={role}",
                             *(passed or {})])
        argv = node_command_argv(self.srun, self.job_id, nodes, self.interpreter, self.entry, command, name, gres_gpus,
                                 identity)
        log = files.step_log(self.dir, name)
        log.unlink(missing_ok=True)
        return self.table.spawn(name, argv, {**self.srun_env, **(passed or {}), "DD_SLURM_ROLE": role}, log)

    def node_answers(self, name: str, deadline: float) -> tuple[dict[str, dict], Optional[str]]:
        """The per-node JSON answers of a node command started by `start_on_nodes`, once it has
        exited (killed at `deadline`), and a problem if it did not exit 0."""
        code = self.table.wait(name, deadline)
        if code is None:
            self.table.signal_group(name, signal.SIGKILL)
            self.table.wait(name, self.clock.monotonic() + 5)
        log = files.step_log(self.dir, name)
        answers = {}
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    answer = json.loads(line)
                    answers[answer["node"]] = answer
                except (ValueError, KeyError):
                    continue
        problem = None
        if code != 0:
            tail = " / ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            problem = f"{name}: {'timed out' if code is None else f'exit {code}'}: {tail[:300]}"
        return answers, problem
