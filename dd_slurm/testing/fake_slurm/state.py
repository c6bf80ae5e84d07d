"""The fake cluster's state file, locked for each read-modify-write."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STATE_NAME = "fake-slurm-state.json"


class FakeSlurm:
    """Test-side handle: script faults, set job states, read the call log."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = Path(bin_dir)
        self.path = self.bin_dir / STATE_NAME

    def reset(self) -> None:
        import shutil

        shutil.rmtree(self.bin_dir / "jobs", ignore_errors=True)  # exit codes of a previous life's job ids
        with self.edit() as state:
            state.clear()
            state.update({"next_id": 1000, "jobs": {}, "faults": {}, "calls": []})

    @contextmanager
    def edit(self) -> Iterator[dict[str, Any]]:
        with open(self.bin_dir / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(self.path.read_text()) if self.path.exists() else {}
            yield state
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.path)

    def read(self) -> dict[str, Any]:
        with self.edit() as state:
            return json.loads(json.dumps(state))

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

    def calls(self, tool: str | None = None) -> list[list[str]]:
        return [c["argv"] for c in self.read()["calls"] if tool is None or c["tool"] == tool]
