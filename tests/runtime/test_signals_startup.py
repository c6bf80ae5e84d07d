"""Signals from the first instruction, and the gate before every launch.

The supervisor is started exactly as the rendered script starts it (the boot, entry.py, `run`) and
signalled 0, 10, 50 ... ms after it was spawned. The boot's first instruction installs the recording
handlers; before it, only the interpreter's own start-up runs (measured here with a bare
interpreter given the same flags), and a signal in that window ends the process as it would any
program. From the handlers on, every signal is journaled and cleaned up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.runtime.harness import (
    NODES,
    allocation_env,
    journal,
    no_leftovers,
    outcome,
    plan_data,
    read,
    servers_started,
    stage_plan,
    supervisor_argv,
)

DELAYS_MS = [0, 10, 50, 100, 200, 400, 800, 1600, 3200]


def caught(pid: int, signo: int) -> bool:
    """Whether `pid` has a handler for `signo` now (SigCgt in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
    return bool(mask >> (signo - 1) & 1)


def interpreter_floor(signo: int) -> float:
    """Seconds from spawn until a bare interpreter with the supervisor's flags runs its first
    instruction (installing a handler): the window no program can close. The slowest of three."""
    found = []
    for _ in range(3):
        start = time.monotonic()
        bare = subprocess.Popen(["/usr/bin/python3", "-I", "-S", "-B", "-c",
                                 f"import _signal,time;_signal.signal({int(signo)},lambda*a:None);time.sleep(5)"])
        while not caught(bare.pid, signo) and time.monotonic() - start < 5:
            time.sleep(0.0005)
        found.append(time.monotonic() - start)
        bare.kill()
        bare.wait()
    return max(found)


def _start(tmp_path, fake_slurm, data, bin_dir=None):
    staged = stage_plan(tmp_path, data)
    env = allocation_env(bin_dir or fake_slurm.bin_dir, NODES[: data["job"]["nodes"]], data["job"]["gpus_per_node"])
    proc = subprocess.Popen(supervisor_argv(staged, data), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return staged, proc


@pytest.mark.timeout(120)
@pytest.mark.parametrize("delay_ms", DELAYS_MS)
@pytest.mark.parametrize("signo, expected", [(signal.SIGTERM, ("cancelled", "sigterm")),
                                             (signal.SIGUSR1, ("timed_out", "pre_timeout_signal"))],
                         ids=["SIGTERM", "SIGUSR1"])
def test_a_signal_at_any_moment_of_start_up_is_journaled_and_cleaned_up(tmp_path, fake_slurm, delay_ms, signo,
                                                                        expected) -> None:
    """Whenever it lands, the signal decides the outcome: the attempt reaches done through
    cleanup once with that outcome, the cleanup report is finished, `run` exits 4 and nothing of
    the attempt is left running."""
    data = plan_data("single-node")
    data["client"]["argv"] += ["--sleep", "5"]
    window = 2 * interpreter_floor(signo) + 0.02
    staged, proc = _start(tmp_path, fake_slurm, data)
    try:
        time.sleep(delay_ms / 1000)
        recording = caught(proc.pid, signo)
        proc.send_signal(signo)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    if not recording:  # only inside the interpreter's own start-up
        assert delay_ms / 1000 < window, f"no handler {delay_ms} ms after start (interpreter start-up {window:.3f}s)"
        assert (-signo, False) == (proc.returncode, (staged.attempt_dir / "journal.jsonl").exists())
        return
    assert 4 == proc.returncode, output
    moves = journal(staged.attempt_dir)
    assert (expected, 1) == (outcome(staged.attempt_dir), sum(1 for _a, b, _r in moves if b == "cleanup")), moves
    assert (True, []) == (read(staged.attempt_dir, "cleanup.json")["finished"], no_leftovers(staged.attempt_id))


SRUN_SIGNALLING_AFTER_PROBE = """#!{python}
import os, signal, subprocess, sys
code = subprocess.call([{srun!r}] + sys.argv[1:])
if "--job-name=probe" in sys.argv:
    os.kill(os.getppid(), signal.SIGTERM)  # the supervisor: verification is over, nothing launched yet
sys.exit(code)
"""


def _bin_with_srun(directory: Path, fake_bin: Path, script: str) -> Path:
    directory.mkdir()
    for tool in ("sbatch", "squeue", "sacct", "scancel", "scontrol"):
        os.symlink(fake_bin / tool, directory / tool)
    (directory / "srun").write_text(script.format(python=sys.executable, srun=str(fake_bin / "srun")))
    (directory / "srun").chmod(0o755)
    return directory


@pytest.mark.timeout(90)
def test_a_signal_as_the_probe_returns_starts_no_server(tmp_path, fake_slurm) -> None:
    """SIGTERM as the node probe's step (on the nodes other than the supervisor's) returns: the gate
    stops the attempt before any server or the gateway is started; the only program that may have
    started is the client preflight, launched beside the probe (the deployment steps launched
    held beside it are never released), and cleanup leaves nothing of any of them."""
    bin_dir = _bin_with_srun(tmp_path / "bin", fake_slurm.bin_dir, SRUN_SIGNALLING_AFTER_PROBE)
    staged, proc = _start(tmp_path, fake_slurm, plan_data("two-deployments"), bin_dir)
    output, _ = proc.communicate(timeout=80)
    assert 4 == proc.returncode, output
    assert ("cancelled", "sigterm") == outcome(staged.attempt_dir)
    others = sorted(p.name for p in (staged.attempt_dir / "steps").glob("*.started.json")
                    if p.name != "preflight.started.json")
    assert ([], [], []) == (others, servers_started(staged.attempt_dir), no_leftovers(staged.attempt_id))


@pytest.mark.timeout(90)
def test_a_signal_during_the_last_readiness_probe_does_not_start_the_client(tmp_path, fake_slurm) -> None:
    """The server SIGTERMs the supervisor while answering the probe that makes it ready: the
    deployment is ready, but the client is never launched."""
    data = plan_data("single-node")
    dep = data["deployments"][0]
    dep["argv"] = ["/usr/bin/python3", "{attempt_dir}/bundle/lib/dd_slurm/testing/fault_server.py", "--host", "{host}",
                   "--port", "{port}", "--load-time", "0.5", "--signal-on-health", "{attempt_dir}"]
    staged, proc = _start(tmp_path, fake_slurm, data)
    output, _ = proc.communicate(timeout=80)
    assert 4 == proc.returncode, output
    assert ("cancelled", "sigterm") == outcome(staged.attempt_dir)
    assert not (staged.attempt_dir / "steps" / "client.json").exists()
    assert [] == no_leftovers(staged.attempt_id)
