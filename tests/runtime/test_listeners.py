"""The on-node ownership check (real listening sockets of throwaway processes), the automatic port
allocator, and validation of what a leader's launcher publishes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.runtime.node.listeners import check_listener, parse_hex_address, reachable
from dd_slurm.runtime.node.procfs import start_time
from dd_slurm.runtime.node.stepexec import automatic_ports, choose_port, ephemeral_range, launch_plan
from dd_slurm.runtime.replicas import identity_request, published_port
from dd_slurm.runtime.step_specs import StepSpec

LISTEN = (
    "import socket, sys, time\n"
    "family = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET\n"
    "s = socket.socket(family)\n"
    "s.bind((sys.argv[1], 0))\n"
    "s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "time.sleep(60)\n"
)
PARENT = (  # listens only in a child it starts (as a server's worker process would)
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]], stdout=sys.stdout)\n"
    "child.wait()\n"
)


class Proc:
    def __init__(self, code: str, address: str, *extra: str) -> None:
        self.popen = subprocess.Popen([sys.executable, "-c", code, address, *extra], stdout=subprocess.PIPE,
                                      text=True, start_new_session=True)
        self.port = int(self.popen.stdout.readline())

    def request(self, port: int) -> dict:
        return {"port": port, "pid": self.popen.pid, "start_time": start_time(self.popen.pid), "pgid": self.popen.pid}

    def stop(self) -> None:
        import os
        import signal

        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield lambda *args: started.append(Proc(*args)) or started[-1]
    for proc in started:
        proc.stop()


def test_own_listener_is_ours(procs) -> None:
    """The launched process itself listens on the port: ours."""
    server = procs(LISTEN, "127.0.0.1")
    answer = check_listener(server.request(server.port), "127.0.0.1")
    assert (True, None, [server.popen.pid]) == (answer["ours"], answer["detail"], answer["listeners"][0]["pids"])


def test_listener_of_a_child_process_is_ours(procs) -> None:
    """The launched process started a child that holds the listening socket: still ours."""
    server = procs(PARENT, "127.0.0.1", LISTEN)
    answer = check_listener(server.request(server.port), "127.0.0.1")
    assert True is answer["ours"]
    assert server.popen.pid not in answer["listeners"][0]["pids"]


def test_foreign_listener_is_not_ours(procs) -> None:
    """Another process listens on the step's port: not ours, and the detail names its pid."""
    ours = procs(LISTEN, "127.0.0.1")
    foreign = procs(LISTEN, "127.0.0.1")
    answer = check_listener(ours.request(foreign.port), "127.0.0.1")
    assert (False, f"the listener on 127.0.0.1:{foreign.port} belongs to pid {foreign.popen.pid}, not to the "
                   "step's processes") == (answer["ours"], answer["detail"])


def test_a_reused_pid_is_not_the_launched_process(procs) -> None:
    """Same pid, other start time (the launched process is gone, the pid reused): not ours."""
    server = procs(LISTEN, "127.0.0.1")
    request = {**server.request(server.port), "start_time": start_time(server.popen.pid) - 1}
    assert False is check_listener(request, "127.0.0.1")["ours"]


@pytest.mark.parametrize(("bind", "node"), [("::1", "::1"), ("::", "127.0.0.1")])
def test_ipv6_listeners(procs, bind, node) -> None:
    """An IPv6 listener on the node's address, and a dual-stack wildcard one that an IPv4
    connection to the node reaches: found in tcp6 and ours."""
    server = procs(LISTEN, bind)
    answer = check_listener(server.request(server.port), node)
    assert (True, bind) == (answer["ours"], answer["listeners"][0]["address"])


def test_a_listener_on_another_address_does_not_count(procs) -> None:
    """A socket bound to another address (another lab node) is not what a connection to this
    node reaches: nothing listens for it."""
    server = procs(LISTEN, "127.0.2.9")
    answer = check_listener(server.request(server.port), "127.0.2.8")
    assert (False, f"nothing listens on port {server.port} for 127.0.2.8") == (answer["ours"], answer["detail"])


@pytest.mark.parametrize(("text", "expected"), [
    ("0100007F", "127.0.0.1"), ("00000000", "0.0.0.0"), ("0102007F", "127.0.2.1"),
    ("00000000000000000000000001000000", "::1"), ("0000000000000000FFFF00000102007F", "::ffff:127.0.2.1"),
])
def test_proc_net_addresses(text, expected) -> None:
    """/proc/net/tcp{,6} local addresses (32-bit words in host byte order) decode as written."""
    import ipaddress

    assert ipaddress.ip_address(expected) == parse_hex_address(text)


@pytest.mark.parametrize(("bound", "node", "expected"), [
    ("0.0.0.0", "127.0.2.1", True), ("::", "127.0.2.1", True), ("::ffff:127.0.2.1", "127.0.2.1", True),
    ("127.0.2.1", "127.0.2.1", True), ("127.0.2.2", "127.0.2.1", False), ("::1", "127.0.0.1", False),
])
def test_which_listeners_a_connection_to_the_node_reaches(bound, node, expected) -> None:
    """Its own address, a wildcard and its IPv4-mapped form; never another address."""
    assert expected == reachable(bound, node)


def test_port_allocator_gives_a_free_port_not_avoided(tmp_path) -> None:
    """A port >= 1024 that can be bound right away on the address, never one in `avoid`; an
    address the machine does not have gives none."""
    claims = str(tmp_path / "claims")
    first = choose_port("127.0.0.1", [], claims=claims)
    second = choose_port("127.0.0.1", [first], claims=claims)
    assert first >= 1024 and second != first
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", second))
    assert None is choose_port("203.0.113.7", [], claims=claims)


def test_launcher_expands_the_chosen_port_and_records_it() -> None:
    """With choose_port the launcher picks the port, expands {port} with it (literal braces stay)
    and records it; the program is looked up on the step's own PATH."""
    spec = {"argv": ["python3", "--port", "{port}", "{{x}}"], "values": {}, "choose_port": True, "rank": 0}
    program, argv, noted, problem = launch_plan(spec, {"PATH": "/usr/bin"}, "n1", "127.0.0.1")
    assert ("/usr/bin/python3", ["python3", "--port", str(noted["port"]), "{x}"], None) == (program, argv, problem)
    program, _argv, _noted, problem = launch_plan(spec, {"PATH": "/nowhere"}, "n1", "127.0.0.1")
    assert ("", ("executable_missing", "executable ['python3'] not found on n1")) == (program, problem)
    _program, _argv, noted, problem = launch_plan(spec, {"PATH": "/usr/bin"}, "n1", "203.0.113.7")
    assert ({"port": None}, ("port_busy", "no free port on n1")) == (noted, problem)


LEADER = StepSpec(name="deploy-small-0", node="n1", argv=("x",), values={}, env={}, deployment="small",
                  choose_port=True)
FIXED = StepSpec(name="deploy-small-1", node="n1", argv=("x",), values={"port": "9001"}, env={}, deployment="small",
                 replica=1)
GOOD = {"name": "deploy-small-0", "node": "n1", "port": 40000, "pid": 1234, "start_time": 99, "pgid": 1234}


@pytest.mark.parametrize(("record", "spec"), [
    ({**GOOD, "port": "40000"}, LEADER), ({**GOOD, "port": True}, LEADER), ({**GOOD, "port": 80}, LEADER),
    ({**GOOD, "port": 70000}, LEADER), ({**GOOD, "name": "deploy-other-0"}, LEADER), ({**GOOD, "node": "n2"}, LEADER),
    ({**GOOD, "name": "deploy-small-1", "port": 9002}, FIXED), ([GOOD], LEADER), ({**GOOD, "port": None}, LEADER),
])
def test_published_ports_are_validated(record, spec) -> None:
    """A port read back from the step record must be an int in 1024..65535, from the record of
    that very step on its node, and the planned one when the plan fixed it."""
    with pytest.raises(ValueError):
        published_port(record, spec)


def test_valid_records_give_the_port_and_the_identity_request() -> None:
    """A well-formed record yields its port and the (pid, start time, group) the check uses."""
    assert 40000 == published_port(GOOD, LEADER)
    assert 9001 == published_port({**GOOD, "name": "deploy-small-1", "port": 9001}, FIXED)
    assert {"port": 40000, "pid": 1234, "start_time": 99, "pgid": 1234} == identity_request(GOOD, LEADER, 40000)
    with pytest.raises(ValueError):
        identity_request({**GOOD, "pid": -1}, LEADER, 40000)


def test_proc_listener_helper_is_quick_to_start() -> None:
    """Sanity for this module's helpers: a listening child reports its port within seconds."""
    started = time.monotonic()
    proc = Proc(LISTEN, "127.0.0.1")
    try:
        assert proc.port >= 1024 and time.monotonic() - started < 30
    finally:
        proc.stop()


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ((32768, 60999), range(61000, 65536)),  # Linux's default: above it
    ((40000, 64999), range(10000, 40000)),  # too little room above: below it
    ((1024, 65535), range(0)),  # no room at all: the kernel's choice
    ((9000, 65000), range(0)),
])
def test_automatic_ports_lie_outside_the_kernels_ephemeral_range(ephemeral, expected) -> None:
    """Ports the kernel hands to bind(0) and outgoing connections (srun's, a loading vLLM's) are
    never chosen while there is room outside them."""
    assert expected == automatic_ports(ephemeral)


@given(st.integers(1024, 65535), st.integers(0, 64511))
def test_automatic_ports_never_overlap_the_ephemeral_range(low: int, width: int) -> None:
    """For any range the kernel may use, the automatic ones are outside it, at 1024 or above, and
    at least 1000 of them (or none)."""
    high = min(low + width, 65535)
    ports = automatic_ports((low, high))
    assert (True, True) == (all(p < low or p > high for p in (ports[0], ports[-1])) if ports else True,
                            len(ports) == 0 or (len(ports) >= 1000 and ports[0] >= 1024))


def test_a_chosen_port_is_outside_this_machines_ephemeral_range_and_skips_busy_ones(tmp_path) -> None:
    """On this machine the chosen port is outside ip_local_port_range; in a range of two ports with
    one taken, the other is chosen every time; the range file unreadable is Linux's default."""
    low, high = ephemeral_range()
    assert not low <= choose_port("127.0.0.1", [], claims=str(tmp_path / "claims")) <= high
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        free = taken + 1 if taken < 65535 else taken - 1
        assert {free} == {choose_port("127.0.0.1", [], ports=range(min(taken, free), max(taken, free) + 1),
                                      claims=str(tmp_path / f"claims-{i}")) for i in range(10)}
    assert (32768, 60999) == ephemeral_range(str(tmp_path / "missing"))
