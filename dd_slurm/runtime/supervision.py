"""One supervisor per attempt: an exclusive lock in the attempt dir that holds on a shared file system.

The lock is a file created with O_CREAT|O_EXCL (atomic on local file systems and on NFSv3+)
holding the holder's job id, step, node, host, boot id, pid and process start time. Its flock is
a fast path where flock works: a lock another process holds is live without further questions.
Otherwise the holder is checked: on the same machine (host and boot id), by pid and start time in
/proc; on another machine, by asking Slurm whether the holder's job still runs. Only a holder that
is certainly gone is replaced; when the answer is unknown the lock stands.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional, Protocol

import attrs

from dd_slurm.errors import InvalidInput
from dd_slurm.runtime.node.procfs import start_time
from dd_slurm.store import attempt_files as files

TAKEOVER_STALE_S = 30.0


class SupervisionRefused(InvalidInput):
    """Another supervisor holds the attempt, or this process may not supervise it: exit 2."""


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


# Slurm's batch step id, SLURM_BATCH_SCRIPT (0xfffffffb): 26.05 exports it as a signed number.
BATCH_STEP_IDS = ("4294967291", "-5")


def step_name(step_id: str) -> str:
    """The step as a person reads it: `batch` for the batch step on every release."""
    return "batch" if step_id in BATCH_STEP_IDS else step_id


@attrs.frozen
class Holder:
    command: str
    job_id: str
    step_id: str
    node: str
    host: str
    boot_id: str
    pid: int
    start_time: Optional[int]
    since: float

    @classmethod
    def me(cls, command: str, environ: Mapping[str, str]) -> Holder:
        pid = os.getpid()
        host = socket.gethostname().split(".")[0]
        return cls(command, environ.get("SLURM_JOB_ID", ""), step_name(environ.get("SLURM_STEP_ID", "batch")),
                   environ.get("SLURMD_NODENAME") or host, host, boot_id(), pid, start_time(pid), time.time())

    def to_json(self) -> dict:
        from dd_slurm.store.converter import CONVERTER

        return CONVERTER.unstructure(self)

    @classmethod
    def parse(cls, data: bytes) -> Holder:
        """Validated through the one strict converter (a lock file is read back from a shared
        disk): a ValueError naming the first wrong field otherwise."""
        from dd_slurm.store.converter import structure_checked

        return structure_checked(json.loads(data), cls)

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        job = f"job {self.job_id} step {self.step_id}" if self.job_id else "no job"
        return f"`{self.command}` pid {self.pid} on {self.node} ({job}, since {since})"

    def same_machine(self, other: Holder) -> bool:
        return self.host == other.host and self.boot_id == other.boot_id and bool(self.boot_id)


def pid_alive(holder: Holder) -> bool:
    return holder.start_time is not None and start_time(holder.pid) == holder.start_time


class SupervisorLock:
    """acquire() or SupervisionRefused; release() only removes the lock while it is still ours.
    `job_live(job_id)` answers True, False, or None (unknown) for a holder on another machine."""

    def __init__(self, attempt_dir: Path, me: Holder, job_live: Callable[[str], Optional[bool]]) -> None:
        self.path = Path(attempt_dir) / files.SUPERVISOR_LOCK
        self.me, self.job_live = me, job_live
        self.fd: Optional[int] = None

    def acquire(self) -> None:
        for _ in range(3):
            if self._create():
                return
            holder, fd = self._read_holder()
            if holder is None:  # vanished between our create and read (released): try again
                continue
            try:
                live = self._holder_live(holder, fd)
            finally:
                os.close(fd)
            if live is not False:
                unknown = "" if live else " (whether it still runs could not be checked)"
                raise SupervisionRefused(f"{self.path.parent}: already supervised by {holder.describe()}{unknown}; "
                                         "not starting a second supervisor")
            self._take_over(holder)
        raise SupervisionRefused(f"{self.path.parent}: the supervisor lock keeps changing hands; try again")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if Holder.parse(self.path.read_bytes()) == self.me:
                self.path.unlink()
        except (OSError, ValueError):
            pass
        os.close(self.fd)
        self.fd = None

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        os.write(fd, json.dumps(self.me.to_json(), sort_keys=True).encode())
        os.fsync(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # a file system without flock: the lock file alone decides
        self.fd = fd
        return True

    def _read_holder(self) -> tuple[Optional[Holder], int]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None, -1
        data = os.read(fd, 65536)
        try:
            return Holder.parse(data), fd
        except ValueError as err:
            why = str(err)
            os.close(fd)
            raise SupervisionRefused(f"{self.path}: not a supervisor lock record ({why}); "
                                     "remove it if no supervisor runs") from None

    def _holder_live(self, holder: Holder, fd: int) -> Optional[bool]:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # the fast path: its holder has it flocked
        except OSError:
            pass
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)  # free here; on NFS that may not speak for other nodes
        if holder.same_machine(self.me):
            return pid_alive(holder)
        if not holder.job_id:
            return None
        return self.job_live(holder.job_id)

    def _take_over(self, stale: Holder) -> None:
        """Replace a lock whose holder is certainly gone; one taker at a time (O_EXCL again)."""
        takeover = self.path.with_name(files.SUPERVISOR_TAKEOVER)
        try:
            fd = os.open(takeover, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            if time.time() - takeover.stat().st_mtime < TAKEOVER_STALE_S:
                raise SupervisionRefused(f"{self.path.parent}: another process is replacing a stale supervisor lock") from None
            takeover.unlink(missing_ok=True)
            return
        try:
            holder, check = self._read_holder()
            if check >= 0:
                os.close(check)
            if holder == stale:
                aside = self.path.with_name(f"{files.SUPERVISOR_LOCK}.stale-{os.getpid()}-{secrets.token_hex(3)}")
                os.rename(self.path, aside)
                aside.unlink()
        finally:
            os.close(fd)
            takeover.unlink(missing_ok=True)


class _Seen(Protocol):
    """What a liveness check reads of an observation (scheduler.observe's Observation)."""

    @property
    def terminal(self) -> bool: ...


def job_live_via(query: Callable[[str], Optional[_Seen]]) -> Callable[[str], Optional[bool]]:
    """A liveness check from an observation function (job id -> Observation)."""

    def live(job_id: str) -> Optional[bool]:
        from dd_slurm.errors import DdSlurmError

        try:
            found = query(job_id)
        except DdSlurmError:
            return None
        if found is None or getattr(found, "state", None) in ("accounting_lag", "unknown"):
            return None
        return not found.terminal

    return live
