"""The fake cluster's state file, locked for each read-modify-write, and its call log (one JSON
line per tool call, appended: a call costs no rewrite of everything called before it)."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATE_NAME = "fake-slurm-state.json"
CALLS_NAME = "fake-slurm-calls.jsonl"


class FakeSlurm:
    """Test-side handle: script faults, set job states, read the call log."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = Path(bin_dir)
        self.path = self.bin_dir / STATE_NAME
        self.calls_path = self.bin_dir / CALLS_NAME

    def reset(self) -> None:
        import shutil

        shutil.rmtree(self.bin_dir / "jobs", ignore_errors=True)  # exit codes of a previous life's job ids
        with self.edit() as state:
            state.clear()
            state.update({"next_id": 1000, "jobs": {}, "faults": {}})
            self.calls_path.write_text("")

    @contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        with open(self.bin_dir / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            before = self.path.read_text() if self.path.exists() else "{}"
            state = json.loads(before)
            yield state
            if "calls" in state:  # the call log replaced as a whole (`state["calls"] = []` resets it)
                with open(self.calls_path, "w") as log:
                    log.writelines(json.dumps(call) + "\n" for call in state.pop("calls"))
            after = json.dumps(state)
            if after != before:  # a look that changed nothing writes nothing
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(after)
                os.replace(tmp, self.path)

    def end_everything(self, under: str) -> None:
        """What every job's end does on a real cluster (slurmd ends its steps too): SIGKILL each job's
        process group and each step's (its srun's, with every task and their children). Only
        processes that still show a path under `under` (a test's own tmp dir) in their environment
        or command line are touched: pids wrap around quickly here (pid_max 32768), so one recorded
        earlier may belong to another test's process by now."""
        marker = os.path.join(under, "").encode()
        state = self.snapshot()
        for job in state["jobs"].values():
            for pid in [job.get("pid"), job.get("driver"), *(t.get("pid") for t in job.get("tasks", {}).values())]:
                if pid and _shows(pid, marker):
                    _killpg(pid)
        for tasks in state.get("steps", {}).values():
            for pid in tasks:
                if _shows(pid, marker):
                    _kill_group_of(pid)
        for pid in _unrecorded(marker):  # an srun the job started just before its end, not yet in the state
            _kill_group_of(pid)

    def read(self) -> dict[str, Any]:
        """The state, with `calls` (every tool call so far, in order) from the call log."""
        return {**self.snapshot(), "calls": self._calls()}

    def snapshot(self) -> dict[str, Any]:
        """A copy of the state (jobs, steps, faults), without the call log."""
        with self.edit() as state:
            return json.loads(json.dumps(state))

    def record_call(self, tool: str, argv: list[str]) -> dict[str, Any] | None:
        """Log a call, and take the first fault scripted for it (None: the tool does its work)."""
        with self.edit() as state:
            with open(self.calls_path, "a") as log:
                log.write(json.dumps({"tool": tool, "argv": argv}) + "\n")
            queue = state["faults"].get(tool) or []
            index = next((i for i, f in enumerate(queue) if not f.get("match") or f["match"] in argv), None)
            return queue.pop(index) if index is not None else None

    def _calls(self) -> list[dict[str, Any]]:
        try:
            return [json.loads(line) for line in self.calls_path.read_text().splitlines() if line]
        except OSError:
            return []

    def add_fault(self, tool: str, exit: int = 1, stderr: str = "", stdout: str = "", hang: float = 0.0,
                  times: int = 1, after_work: bool = False, match: str = "", job: dict | None = None) -> None:
        """The next `times` calls of `tool` answer like this instead of doing their work (or, with
        `after_work`, after doing it: a submission that happened but whose answer was lost, as
        when sbatch creates the job and then reports `Socket timed out`). With `match`, only calls
        with that exact argument are affected. `job` (sbatch after_work): fields of the created
        job, such as `{"in_squeue": False}` for a job that already left the queue."""
        with self.edit() as state:
            faults = state["faults"].setdefault(tool, [])
            fault = {"exit": exit, "stderr": stderr, "stdout": stdout, "hang": hang, "after_work": after_work,
                     "match": match, "job": job or {}}
            faults += [fault] * times

    def set_job(self, job_id: str, **fields: Any) -> None:
        """Override what squeue/sacct say of a job: state, reason, exit, in_squeue, in_sacct."""
        with self.edit() as state:
            state["jobs"][job_id].update(fields)

    def add_older_array(self, job_id: str, tasks: dict[int, tuple[str, str]], ended_at: float) -> None:
        """Accounting of an older array job that had this id (slurmctld lost its state and counts
        again): `sacct --jobs=ID` lists its tasks (state, exit code) too, as real sacct does (each
        task has its own raw id, so sacct's newest-of-a-duplicate-id rule keeps them), unless
        `--starttime` is later than `ended_at`."""
        with self.edit() as state:
            older = state.setdefault("older", {}).setdefault(job_id, [])
            older += [{"display": f"{job_id}_{task}", "raw": str(int(job_id) * 1000 + task), "state": st,
                       "exit": code, "ended": ended_at}
                      for task, (st, code) in sorted(tasks.items())]

    def calls(self, tool: str | None = None) -> list[list[str]]:
        return [c["argv"] for c in self._calls() if tool is None or c["tool"] == tool]


def _shows(pid: int, marker: bytes) -> bool:
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                if marker in handle.read():
                    return True
        except OSError:
            return False
    return False


def _unrecorded(marker: bytes) -> list[int]:
    """Every other process (not this one or its ancestors) showing `marker`: what the job started
    whose pid the state does not hold yet (slurmd would end it with the job all the same)."""
    ours, pid = set(), os.getpid()
    while pid > 1:
        ours.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in ours and _shows(int(p), marker)]


def _kill_group_of(pid: int) -> None:
    """SIGKILL the process group of `pid`, unless it is the caller's own (a step whose srun a test
    started without a session of its own)."""
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return
    if group != os.getpgrp():
        _killpg(group)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, 9)
    except (ProcessLookupError, PermissionError):
        pass
