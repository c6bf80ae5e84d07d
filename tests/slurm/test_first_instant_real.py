"""A stop signal at the supervisor's first instant is not lost: the batch script starts with the
stop signals blocked (env --block-signal), so a SIGTERM that lands before the interpreter has its
handlers stays pending until the boot installs them, and the attempt ends cancelled, journaled,
with a clean cleanup, instead of a dead supervisor that wrote nothing (supervisor_lost).

One window is left, and the test names it: between the kernel's exec of the script (the process
is then called `slurm_script`) and env blocking the signals (env's own start-up, about a
millisecond). A SIGTERM there ends the script before any of it ran; `status` then says
cancelled (never_started): nothing had started, nothing is lost. The last test shows why no
program can close it: Slurm starts the script with no signal blocked, so only Slurm could."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import pytest

from tests.runtime.harness import plan_data, read
from tests.slurm.real_attempt import EXE, PREFIX, submit, wait_job_gone

SIGTERM_BIT = 1 << (signal.SIGTERM - 1)  # in /proc/PID/status's signal masks

TRIES = 20


class FirstSight:
    """Scans /proc without pause for new processes whose environment marks them a supervisor of
    an attempt whose id starts with `prefix`, and sends each SIGTERM the moment it is seen."""

    def __init__(self, prefix: str) -> None:
        self.marks = (f"DD_SLURM_ATTEMPT_ID={prefix}".encode(), b"DD_SLURM_ROLE=supervisor")
        self.seen: set[tuple[int, bytes]] = set()  # (pid, stat's comm and start time): looked at again once it execs
        self.hit: dict[str, str] = {}  # attempt id -> the program its supervisor's process ran when signalled
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    self.look(int(entry.name))

    def look(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read()
            comm, fields = stat[stat.index(b"(") + 1:stat.rindex(b")")], stat[stat.rindex(b")") + 2:].split()
            key = (pid, comm + b" " + fields[19])  # a pid comes round again; its start time does not
            if key in self.seen:
                return
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            return
        if not environ:  # mid-exec: the new program's name is set before its environment is: look again
            return
        environ = environ.split(b"\0")
        self.seen.add(key)
        ours = [v for v in environ if v.startswith(self.marks[0])]
        if not ours or self.marks[1] not in environ or ours[0].split(b"=", 1)[1].decode() in self.hit:
            return  # not a supervisor, or the supervisor's own children (forked, not yet exec'd)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        self.hit[ours[0].split(b"=", 1)[1].decode()] = comm.decode()


def slow_plan() -> dict:
    """An attempt that lives a minute unless stopped: on a loaded machine the watcher's scan of
    /proc can take seconds, and an attempt that ended first would never be signalled at all."""
    data = plan_data("single-node")
    data["client"]["argv"] += ["--sleep", "60"]
    data["client"]["timeout_s"] = None
    return data


SCRIPT_COMM = "slurm_script"  # the name the kernel gives a process that execs a script by its #! line


def effective(attempt_dir, cluster) -> dict:
    out = subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True, timeout=60,
                         env=cluster.env())
    return json.loads(out.stdout)["effective"]


@pytest.mark.timeout(420)
def test_a_sigterm_at_the_supervisors_first_instant_ends_the_attempt_cancelled(tmp_path, cluster) -> None:
    """TRIES attempts, each supervisor sent SIGTERM by a /proc watcher the moment its process
    shows the attempt's environment. Every one that the signal met once its script's interpreter
    started (env done, bash, or Python before its handlers) ends `cancelled` (sigterm) with its
    journal and a clean cleanup; one met inside env's start-up shows in `status` as cancelled
    (never_started) or, when env had blocked the signal already, as above; most are the former kind."""
    watcher = FirstSight(PREFIX["current"] + "first-")
    watcher.thread.start()
    try:
        submitted = [submit(tmp_path, slow_plan(), f"first-{n}") for n in range(TRIES)]
        for _attempt_dir, job_id in submitted:
            wait_job_gone(job_id, 300)
    finally:
        watcher.stop.set()
    cancelled = ({"outcome": "cancelled", "reason": "sigterm", "from": "attempt"}, "clean")
    unstarted = ({"outcome": "cancelled", "reason": "never_started", "from": "scheduler"}, None)
    ends = {d.name: (effective(d, cluster), (read(d, "cleanup.json") or {}).get("verdict")) for d, _job in submitted}
    late = {n: end for n, end in ends.items() if watcher.hit.get(n) != SCRIPT_COMM}
    early = {n: end for n, end in ends.items() if watcher.hit.get(n) == SCRIPT_COMM}
    report = json.dumps({n: [*end, watcher.hit.get(n)] for n, end in ends.items()}, indent=1)
    assert set(ends) == set(watcher.hit), report
    assert {n: cancelled for n in late} == late, report
    assert [] == [n for n, end in early.items() if end not in (cancelled, unstarted)], report
    assert len(early) <= TRIES // 4, report


@pytest.mark.timeout(120)
def test_slurm_starts_the_batch_script_with_no_signal_blocked(tmp_path, cluster) -> None:
    """The window's cause, on every release: slurmstepd execs the batch script with an empty
    signal mask and SIGTERM at its default action. A script whose `#!` line is
    `/bin/cat /proc/self/status` prints the masks its first program starts with, before any
    instruction of its own: nothing Slurm does holds a stop signal there, so a SIGTERM before that
    program blocks it (env, here) ends the script."""
    script, out = tmp_path / "masks.sh", tmp_path / "masks.out"
    script.write_text("#!/bin/cat /proc/self/status\n")
    script.chmod(0o755)
    sbatch = subprocess.run([cluster.tool("sbatch"), "--parsable", "-J", PREFIX["current"] + "masks", "-N1", "-o", str(out),
                             str(script)], capture_output=True, text=True, timeout=60, env=cluster.env())
    assert 0 == sbatch.returncode, sbatch.stderr
    wait_job_gone(sbatch.stdout.strip().split(";")[0], 60)
    status = dict(line.split(":\t", 1) for line in out.read_text().splitlines() if ":\t" in line)
    assert (SCRIPT_COMM, 0, 0) == (status["Name"], int(status["SigBlk"], 16), int(status["SigIgn"], 16) & SIGTERM_BIT)
