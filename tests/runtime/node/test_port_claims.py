"""Claims on automatic ports between launchers on one node, with real processes: a claim holds
while its process (or what it exec'd) lives, and a port another launcher holds is not chosen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dd_slurm.runtime.node.port_claims import claim
from dd_slurm.runtime.node.stepexec import choose_port

ROOT = Path(__file__).resolve().parents[3]


def claimer(folder: Path, port: int) -> subprocess.Popen:
    """A launcher that claims `port`, then execs `sleep` (as a launcher execs its server)."""
    code = ("import os, sys; from dd_slurm.runtime.node.port_claims import claim; "
            "assert claim(int(sys.argv[2]), sys.argv[1]); print('claimed', flush=True); "
            "os.execv('/bin/sleep', ['sleep', '60'])")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder), str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    assert "claimed" == proc.stdout.readline().strip()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/comm").read_text().strip() != "sleep" and time.monotonic() < deadline:
        time.sleep(0.005)  # until the exec has happened: the claim must outlive the launcher's own code
    return proc


def two_free_ports() -> range:
    """Two neighbouring ports nothing listens on now (the test's range)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535:
            with socket.socket() as other:
                try:
                    other.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return range(port, port + 2)
    raise AssertionError("no two free neighbouring ports")


@pytest.mark.timeout(60)
def test_a_port_another_launcher_claimed_is_not_chosen_until_its_program_ends(tmp_path) -> None:
    """Another launcher claimed one of two free ports and exec'd its program: the claim holds across
    the exec, so the other port is chosen; once that program is killed the port can be claimed."""
    folder = tmp_path / "claims"
    ports = two_free_ports()
    holder = claimer(folder, ports[0])
    try:
        chosen = choose_port("127.0.0.1", [], ports=ports, claims=str(folder))
        held_while_alive = claim(ports[0], str(folder))
    finally:
        holder.kill()
        holder.wait()
    time.sleep(0.05)
    assert (ports[1], False, True) == (chosen, held_while_alive, claim(ports[0], str(folder)))


def test_the_claims_directory_is_shared_and_sticky(tmp_path) -> None:
    """Made 1777 (every user's launchers claim there, none removes another's); a symlink or a
    directory that is not sticky is not used, and then nothing is coordinated (every port counts
    as claimable)."""
    import fcntl

    folder = tmp_path / "claims"
    claim(1234, str(folder))  # held by this process from here on: a second claim of it through folder would fail
    (tmp_path / "loose").mkdir(mode=0o777)
    os.chmod(tmp_path / "loose", 0o777)
    held = os.open(tmp_path / "loose" / "1234", os.O_RDONLY | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # were the loose directory used, 1234 would count as taken
    (tmp_path / "link").symlink_to(folder)
    assert (0o1777, True, True) == (os.stat(folder).st_mode & 0o7777, claim(1234, str(tmp_path / "loose")),
                                    claim(1234, str(tmp_path / "link")))
