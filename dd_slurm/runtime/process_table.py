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
from dd_slurm.runtime.node.procfs import start_time
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic


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


def allow_open_files() -> None:
    """Each held child's pipe stays open here until its release: raise the soft limit on open
    files to the hard one, so a large allocation's held steps do not run out of descriptors."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # the soft limit stays; the launch that runs out of descriptors fails as launch_failed


class ProcessTable:
    def __init__(self, attempt_dir: Path, clock: Clock) -> None:
        self.path = Path(attempt_dir) / files.PROCESSES
        self.clock = clock
        self.procs: dict[str, Tracked] = {}
        self._encoded: dict[str, tuple[dict, bytes]] = {}  # each entry and its JSON, re-encoded when it changes
        self.host = socket.gethostname().split(".")[0]

    def spawn(self, name: str, argv: list[str], env: Mapping[str, str], log: Path, step_record: str = "",
              held: bool = False) -> Tracked:
        """`held`: its stdin is a pipe that only this process holds open, for `release`."""
        if held:
            allow_open_files()
        with open(log, "ab") as out:
            popen = subprocess.Popen(argv, env=dict(env), stdin=subprocess.PIPE if held else subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        tracked = Tracked(name, tuple(argv), popen, popen.pid, popen.pid, start_time(popen.pid), self.host,
                          self.clock.wall(), str(log), step_record)
        self.procs[name] = tracked
        self.persist()
        return tracked

    def release(self, name: str, word: bytes) -> bool:
        """Write `word` to a held child's stdin and close it (empty: end of input alone); False when
        the child is gone (or was never held): whoever watches it learns why from its exit."""
        stdin = self.procs[name].popen.stdin
        if stdin is None or stdin.closed:
            return False
        try:
            stdin.write(word)
            stdin.close()
        except OSError:  # BrokenPipeError: it has exited
            return False
        return True

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
            self.clock.sleep(0.005)  # a short step's exit is on the critical path; a poll is one waitpid
        return self.procs[name].exit_code

    def wait_all(self, names: list[str], deadline: float) -> list[str]:
        """Wait until every one of `names` has exited or the monotonic `deadline` passed; the names
        still running. One sweep polls them all (processes.json written once per sweep)."""
        running = list(names)
        while True:
            exited = {n for n in running if self._reap(n)}
            if exited:
                self.persist()
            running = [n for n in running if n not in exited]
            if not running or self.clock.monotonic() >= deadline:
                return running
            self.clock.sleep(0.02)

    def _reap(self, name: str) -> bool:
        """Whether the child has exited (its code noted, not yet persisted)."""
        tracked = self.procs[name]
        if tracked.exit_code is None:
            tracked.exit_code = tracked.popen.poll()
        return tracked.exit_code is not None

    def persist(self) -> None:
        """processes.json from every entry; an entry is encoded again only when it changed, so
        recording the n-th process does not re-encode the n-1 before it."""
        for name, tracked in self.procs.items():
            entry = tracked.to_json()
            if self._encoded.get(name, ({}, b""))[0] != entry:
                self._encoded[name] = (entry, dump_json(entry).rstrip())
        body = b",\n".join(encoded for _entry, encoded in self._encoded.values())
        # Atomic, not fsynced: the record outlives a supervisor that dies, and a machine that
        # loses its page cache has lost these processes too (an fsync per launch is most of a launch).
        write_atomic(self.path, b'{"processes": [\n' + body + b"\n]}\n", durable=False)
