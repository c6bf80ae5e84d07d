"""The only launcher in the runtime. Every child is tracked by identity (pid, process group, start
time, node, step), registered the moment it exists, and always waited for."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

import attrs

from dd_slurm.clock import Clock
from dd_slurm.runtime.stepexec import start_time
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic


@attrs.define
class Tracked:
    name: str
    argv: tuple[str, ...]
    popen: subprocess.Popen
    pid: int
    pgid: int
    start_time: Optional[int]
    node: str
    started_at: float
    log: str
    step_record: str = ""
    exit_code: Optional[int] = None
    stop: str = ""  # how dd-slurm stopped it: "", "sigterm", "sigkill"

    def to_json(self) -> dict:
        return {"name": self.name, "pid": self.pid, "pgid": self.pgid, "start_time": self.start_time,
                "node": self.node, "started_at": self.started_at, "log": self.log, "argv": list(self.argv),
                "exit_code": self.exit_code, "stop": self.stop, "step_record": self.step_record}


class ProcessTable:
    def __init__(self, attempt_dir: Path, clock: Clock) -> None:
        self.path = Path(attempt_dir) / files.PROCESSES
        self.clock = clock
        self.procs: dict[str, Tracked] = {}
        self.host = socket.gethostname().split(".")[0]

    def spawn(self, name: str, argv: list[str], env: Mapping[str, str], log: Path, step_record: str = "") -> Tracked:
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        tracked = Tracked(name, tuple(argv), popen, popen.pid, popen.pid, start_time(popen.pid), self.host,
                          self.clock.wall(), str(log), step_record)
        self.procs[name] = tracked
        self.persist()
        return tracked

    def poll(self, name: str) -> Optional[int]:
        tracked = self.procs[name]
        if tracked.exit_code is None:
            code = tracked.popen.poll()
            if code is not None:
                tracked.exit_code = code
                self.persist()
        return tracked.exit_code

    def signal_group(self, name: str, signo: int) -> bool:
        """Signal the child's process group, only while the child is unreaped (so its pid cannot
        have been reused)."""
        tracked = self.procs[name]
        if self.poll(name) is not None:
            return False
        try:
            os.killpg(tracked.pgid, signo)
        except ProcessLookupError:
            return False
        stops: dict[int, str] = {signal.SIGTERM: "sigterm", signal.SIGKILL: "sigkill"}
        tracked.stop = stops.get(signo, tracked.stop)
        return True

    def wait(self, name: str, deadline: float) -> Optional[int]:
        """Wait for exit until the monotonic `deadline`; the exit code, or None if still running."""
        while self.poll(name) is None and self.clock.monotonic() < deadline:
            self.clock.sleep(0.02)
        return self.procs[name].exit_code

    def persist(self) -> None:
        write_json_atomic(self.path, {"processes": [t.to_json() for t in self.procs.values()]})
