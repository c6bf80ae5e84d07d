"""The listener identity check under fds and processes that come and go while it reads /proc
(a real server churning files, and a fake /proc where an fd or a process vanishes mid-scan),
and on every address a connection to the node may use, IPv6 as well as IPv4."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dd_slurm.runtime.node.listeners import check_listener, check_listeners, reachable
from dd_slurm.runtime.node.procfs import start_time

pytestmark = pytest.mark.timeout(30)

CHURN = (  # listens, then opens and closes files as fast as it can
    "import socket, sys\n"
    "s = socket.socket()\n"
    "s.bind(('127.0.0.1', 0))\n"
    "s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "while True:\n"
    "    files = [open(sys.executable, 'rb') for _ in range(64)]\n"
    "    for f in files:\n"
    "        f.close()\n"
)
LISTEN_ON = (  # listens on argv[1] port argv[2]
    "import socket, sys, time\n"
    "s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET)\n"
    "s.bind((sys.argv[1], int(sys.argv[2])))\n"
    "s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "time.sleep(30)\n"
)
PORT, INODE = 8000, 555
OURS = {"port": PORT, "pid": 100, "start_time": 7, "pgid": 100}


def hex_address(address: str) -> str:
    """The /proc/net/tcp{,6} form of an address: 32-bit words in host byte order."""
    packed = ipaddress.ip_address(address).packed
    words = [packed[i:i + 4][::-1] if sys.byteorder == "little" else packed[i:i + 4] for i in range(0, len(packed), 4)]
    return b"".join(words).hex().upper()


class FakeProc:
    """A /proc in a temporary directory. `listdir` lists it as os.listdir does, plus what
    vanished between a listing and the next read (fds closed, processes gone), and raises
    what a directory answers once (an fd directory momentarily unreadable)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "net").mkdir(parents=True)
        self.lines: dict[str, list[str]] = {"tcp": [], "tcp6": []}
        self.vanished: dict[Path, list[str]] = {}
        self.fail_once: dict[Path, OSError] = {}
        self.after: dict[Path, Callable[[], None]] = {}
        self.listen("127.0.0.9", PORT + 1, 1)  # another port: never counts

    def listen(self, address: str, port: int, inode: int) -> None:
        table = "tcp6" if ":" in address else "tcp"
        self.lines[table].append(f"0: {hex_address(address)}:{port:04X} 00000000:0000 0A 00000000:00000000 "
                                 f"00:00000000 00000000 1000 0 {inode} 1 0000000000000000 100 0 0 10 0")
        for name, lines in self.lines.items():
            (self.root / "net" / name).write_text("  sl  local_address ...\n" + "\n".join(lines) + "\n")

    def process(self, pid: int, parent: int, group: int, links: dict[int, str]) -> None:
        fd = self.root / str(pid) / "fd"
        fd.mkdir(parents=True)
        (self.root / str(pid) / "stat").write_text(f"{pid} (srv) S {parent} {group} {group} 0 -1 0 0 0 0 0 0 0 0 0 "
                                                   "20 0 1 0 7 0 0\n")
        for number, target in links.items():
            (fd / str(number)).symlink_to(target)

    def listdir(self, path: Path) -> list[str]:
        if path in self.fail_once:
            raise self.fail_once.pop(path)
        names = sorted(os.listdir(path)) + self.vanished.get(path, [])
        self.after.pop(path, lambda: None)()
        return names


@pytest.fixture
def fake(tmp_path) -> FakeProc:
    """Pid 100 (the launched server, its group's leader) holds the listener on 127.0.0.1:PORT as
    fd 3; pid 300 is an unrelated process listed after it."""
    proc = FakeProc(tmp_path / "proc")
    proc.listen("127.0.0.1", PORT, INODE)
    proc.process(100, 1, 100, {3: f"socket:[{INODE}]", 4: "/dev/null"})
    proc.process(300, 1, 300, {0: "/dev/null"})
    return proc


def test_an_fd_closed_between_listing_and_readlink_is_skipped_not_its_process(fake) -> None:
    """The server's fd directory lists fd 7, closed before its readlink, in every scan: the
    other fds are still read, the listener's owner is found, and it is ours."""
    fake.vanished[fake.root / "100" / "fd"] = ["7"]
    answer = check_listeners({"r": OURS}, "127.0.0.1", fake.root, fake.listdir)["r"]
    assert (True, [100]) == (answer["ours"], answer["listeners"][0]["pids"])


def test_a_process_gone_between_the_proc_listing_and_its_fds_holds_nothing(fake) -> None:
    """/proc lists pid 250, which exited before its fds were listed: skipped, the check goes on."""
    fake.vanished[fake.root] = ["250"]
    assert True is check_listeners({"r": OURS}, "127.0.0.1", fake.root, fake.listdir)["r"]["ours"]


def test_an_owner_momentarily_unreadable_is_read_again_not_called_foreign(fake) -> None:
    """The first listing of the owner's fd directory fails (a partial read): the scan is done
    again and the listener is ours; no verdict of 'not ours' comes from the partial read."""
    fake.fail_once[fake.root / "100" / "fd"] = FileNotFoundError("gone for a moment")
    assert True is check_listeners({"r": OURS}, "127.0.0.1", fake.root, fake.listdir)["r"]["ours"]


def test_an_owner_that_exited_before_the_process_table_was_read_is_dropped(fake) -> None:
    """A short-lived child (pid 200) of the server held the listener too, and exited after its
    fds were read but before its stat was: it holds nothing now; the server's listener is ours."""
    fake.process(200, 100, 100, {5: f"socket:[{INODE}]"})
    fake.after[fake.root / "300" / "fd"] = lambda: _remove(fake.root / "200")
    answer = check_listeners({"r": OURS}, "127.0.0.1", fake.root, fake.listdir)["r"]
    assert (True, [100]) == (answer["ours"], answer["listeners"][0]["pids"])


def test_a_foreign_owner_stays_foreign_through_the_rescans(fake) -> None:
    """Pid 300 also holds the listener (fds of both churning): rescans do not make it ours."""
    (fake.root / "300" / "fd" / "9").symlink_to(f"socket:[{INODE}]")
    fake.vanished[fake.root / "300" / "fd"] = ["7"]
    answer = check_listeners({"r": OURS}, "127.0.0.1", fake.root, fake.listdir)["r"]
    assert (False, [100, 300]) == (answer["ours"], answer["listeners"][0]["pids"])


@pytest.mark.parametrize("foreign", ["fd00::5", "::", "::ffff:10.0.0.5", "::ffff:0.0.0.0"])
def test_a_foreign_ipv6_listener_a_connection_could_reach_is_not_ours(fake, foreign) -> None:
    """The node's name resolves to 10.0.0.5 and fd00::5; ours listens on 10.0.0.5, a foreign
    process (pid 300) in tcp6 on the same port on an address one of them reaches: not ours."""
    fake.listen("10.0.0.5", PORT, 600)
    fake.listen(foreign, PORT, 700)
    (fake.root / "100" / "fd" / "8").symlink_to("socket:[600]")
    (fake.root / "300" / "fd" / "9").symlink_to("socket:[700]")
    answer = check_listener({**OURS}, ["10.0.0.5", "fd00::5"], fake.root)
    shown = ipaddress.ip_address(foreign)
    assert (False, f"the listener on {shown}:{PORT} belongs to pid 300, not to the step's processes") == \
        (answer["ours"], answer["detail"])


def test_an_ipv6_listener_on_an_address_no_connection_uses_does_not_count(fake) -> None:
    """A foreign listener on ::1 and ours on the node's addresses (IPv4 and IPv6): a connection
    to the node's name never reaches ::1, so the replica is ours."""
    fake.listen("fd00::5", PORT, 600)
    fake.listen("::1", PORT, 700)
    (fake.root / "100" / "fd" / "8").symlink_to("socket:[600]")
    (fake.root / "300" / "fd" / "9").symlink_to("socket:[700]")
    answer = check_listener({**OURS}, ["127.0.0.1", "fd00::5"], fake.root)
    assert (True, ["127.0.0.1", "fd00::5"]) == (answer["ours"], [s["address"] for s in answer["listeners"]])


@pytest.mark.parametrize(("bound", "node", "expected"), [
    ("::ffff:0.0.0.0", "10.0.0.5", True), ("10.0.0.5", "::ffff:10.0.0.5", True), ("fe80::1", "fe80::1%eth0", True),
    ("::1", "::1", True), ("::1", "fd00::5", False),
])
def test_reachable_knows_mapped_wildcards_mapped_nodes_and_zones(bound, node, expected) -> None:
    """The IPv4-mapped wildcard is a wildcard, an IPv4-mapped node address is its IPv4 form, and
    a resolver's zone index does not hide a link-local address."""
    assert expected == reachable(bound, node)


def _remove(pid_dir: Path) -> None:
    for link in (pid_dir / "fd").iterdir():
        link.unlink()
    (pid_dir / "fd").rmdir()
    (pid_dir / "stat").unlink()
    pid_dir.rmdir()


def _start(code: str, *args: str) -> tuple[subprocess.Popen, int]:
    popen = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    return popen, int(popen.stdout.readline())


def _request(popen: subprocess.Popen, port: int) -> dict:
    return {"port": port, "pid": popen.pid, "start_time": start_time(popen.pid), "pgid": popen.pid}


def test_a_server_opening_and_closing_files_is_ours_in_100_checks_of_100(started) -> None:
    """A real server that opens and closes 64 files in a loop while the check reads its fds:
    every one of 100 checks says ours."""
    popen, port = _start(CHURN)
    started.append(popen)
    answers = [check_listener(_request(popen, port), "127.0.0.1")["ours"] for _ in range(100)]
    assert [True] * 100 == answers


def test_a_real_foreign_listener_on_ipv6_loopback_is_counted_when_the_node_resolves_there(started) -> None:
    """Ours on 127.0.0.1 and a foreign process on [::1] on the same port, for a node whose name
    resolves to both: not ours, naming the foreign pid; for 127.0.0.1 alone: ours."""
    ours, port = _start(LISTEN_ON, "127.0.0.1", "0")
    started.append(ours)
    foreign, _ = _start(LISTEN_ON, "::1", str(port))
    started.append(foreign)
    both = check_listener(_request(ours, port), ["127.0.0.1", "::1"])
    assert (False, f"the listener on ::1:{port} belongs to pid {foreign.pid}, not to the step's processes", True) == \
        (both["ours"], both["detail"], check_listener(_request(ours, port), "127.0.0.1")["ours"])


def test_the_node_address_lookup_gives_every_address_and_none_for_an_unknown_name() -> None:
    """node_addresses lists what the resolver gives (a literal IPv6 or IPv4 address itself) and
    nothing for a name that does not resolve; with no address, every listener on the port counts."""
    from dd_slurm.runtime.node.listeners import node_addresses, reachable_from_any

    assert (["::1"], ["127.0.2.1"], []) == (node_addresses("::1"), node_addresses("127.0.2.1"),
                                           node_addresses("no-such-node.invalid"))
    assert (True, False) == (reachable_from_any("10.9.9.9", []), reachable_from_any("10.9.9.9", ["10.0.0.5"]))


def test_the_fake_tables_hold_addresses_as_the_kernel_writes_them() -> None:
    """Sanity for this module's fake: the hex form it writes reads back as the address."""
    from dd_slurm.runtime.node.listeners import parse_hex_address

    assert [ipaddress.ip_address(a) for a in ("10.0.0.5", "fd00::5")] == \
        [parse_hex_address(hex_address(a)) for a in ("10.0.0.5", "fd00::5")]


class RecordingRunner:
    """A step runner that keeps each on-node request it is given and answers nothing."""

    def __init__(self) -> None:
        self.requests: list[dict] = []

    def on_nodes(self, nodes, command, name, timeout_s, role="scan"):
        import json

        self.requests.append(json.loads(Path(command[1]).read_text()))
        return {}, None


def test_the_supervisor_counts_every_address_each_leaders_name_resolves_to(started, tmp_path) -> None:
    """The supervisor's node resolves to 127.0.0.1 and ::1, where a foreign process listens on
    the replica's port: not ours; another node's request carries the addresses its name
    resolves to on the supervisor's node, where the probes and the gateway connect from."""
    from types import SimpleNamespace

    from dd_slurm.runtime.replica_checks import node_answers

    ours, port = _start(LISTEN_ON, "127.0.0.1", "0")
    started.append(ours)
    foreign, _ = _start(LISTEN_ON, "::1", str(port))
    started.append(foreign)
    runner = RecordingRunner()
    (tmp_path / "steps").mkdir()
    s = SimpleNamespace(ambient={"SLURMD_NODENAME": "here"}, dir=tmp_path, prepared=SimpleNamespace(runner=runner))
    resolved = {"here": ["127.0.0.1", "::1"], "n2": ["10.0.0.7", "fd00::7"]}
    there = {"small-1": {"port": 1, "pid": 1, "start_time": 1, "pgid": 1}}
    answers, _problem = node_answers(s, {"here": {"small-0": _request(ours, port)}, "n2": there},  # type: ignore[arg-type]
                                     "identity-1", resolve=resolved.__getitem__)
    assert (False, [foreign.pid], {"n2": ["10.0.0.7", "fd00::7"]}) == (
        answers["here"]["checks"]["small-0"]["ours"], answers["here"]["checks"]["small-0"]["listeners"][1]["pids"],
        runner.requests[0]["addresses"])
