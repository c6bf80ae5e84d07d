"""The pieces that keep a large allocation's cost flat: one scancel for many steps, readiness and
process records written once per batch, the batched listener check, the launcher's own `which`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from dd_slurm.clock import Clock
from dd_slurm.errors import InvalidInput
from dd_slurm.plan.placement import Placed
from dd_slurm.runtime.node.listeners import check_listener, check_listeners
from dd_slurm.runtime.node.stepexec import which
from dd_slurm.runtime.process_table import ProcessTable
from dd_slurm.runtime.replica_checks import identity_problem
from dd_slurm.scheduler.commands import SlurmCommands
from dd_slurm.store.readiness import Readiness


def test_signal_steps_is_one_scancel_for_all_and_refuses_what_is_not_a_step_id(fake_slurm, tmp_path) -> None:
    """Three steps, one of them long gone, are signalled with a single scancel call; an id that
    is not a job or step id is refused before anything runs."""
    commands = SlurmCommands(Clock(), str(fake_slurm.bin_dir), {})
    with fake_slurm.edit() as state:
        state["steps"] = {"7.0": [], "7.1": []}
    commands.signal_steps(["7.0", "7.1", "7.9"], "TERM")
    assert [["--signal=TERM", "7.0", "7.1", "7.9"]] == fake_slurm.calls("scancel")
    with pytest.raises(InvalidInput):
        commands.signal_steps(["7.0", "--all"], "TERM")
    assert 1 == len(fake_slurm.calls("scancel"))


def test_readiness_batch_writes_the_record_once_and_also_when_it_raises(tmp_path) -> None:
    """Moves inside batch() reach the file at its end, all together; a batch left by an error
    still writes what changed before it."""
    readiness = Readiness.new(tmp_path, "a1", {f"r-{k}": {"deployment": "r", "replica": k} for k in range(3)})
    with readiness.batch():
        for k in range(3):
            readiness.move(f"r-{k}", "starting")
        assert {"pending"} == {d["state"] for d in json.loads(readiness.path.read_text())["deployments"].values()}
    assert {"starting"} == {d["state"] for d in json.loads(readiness.path.read_text())["deployments"].values()}
    with pytest.raises(RuntimeError), readiness.batch():
        readiness.move("r-0", "ready")
        raise RuntimeError("a round failed")
    assert "ready" == json.loads(readiness.path.read_text())["deployments"]["r-0"]["state"]


def test_wait_all_reaps_every_exit_and_records_them(tmp_path) -> None:
    """wait_all returns the names still running at the deadline; the ones that exited have their
    codes in processes.json, which stays one valid JSON document."""
    table = ProcessTable(tmp_path, Clock())
    for name, code in (("a", 0), ("b", 3)):
        table.spawn(name, [sys.executable, "-c", f"raise SystemExit({code})"], dict(os.environ), tmp_path / f"{name}.log")
    table.spawn("slow", [sys.executable, "-c", "import time; time.sleep(30)"], dict(os.environ), tmp_path / "slow.log")
    try:
        assert ["slow"] == table.wait_all(["a", "b", "slow"], Clock().monotonic() + 20)
        recorded = {p["name"]: p["exit_code"] for p in json.loads((tmp_path / "processes.json").read_text())["processes"]}
        assert {"a": 0, "b": 3, "slow": None} == recorded
    finally:
        table.procs["slow"].popen.kill()
        table.procs["slow"].popen.wait()


@contextlib.contextmanager
def listening_child() -> Iterator[tuple[int, dict]]:
    """A child of this test listening on a loopback port: (port, its pid/start_time/pgid); killed
    and waited for on the way out, even when it never said its port."""
    server = subprocess.Popen([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                               "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
                               "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        start = int(open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()[19])
        yield port, {"pid": server.pid, "start_time": start, "pgid": os.getpgid(server.pid)}
    finally:
        server.kill()
        server.wait()


def test_batched_listener_check_answers_each_port_as_the_single_check_does(tmp_path) -> None:
    """Two requests on one node, one port listened by a child of this test and one nobody
    listens on, get the same answers from check_listeners as from check_listener one by one."""
    with listening_child() as (port, identity):
        requests = {"ours": {"port": port, **identity}, "none": {"port": 1, **identity}}
        batched = check_listeners(requests, "127.0.0.1")
        assert {name: check_listener(r, "127.0.0.1") for name, r in requests.items()} == batched
        assert (True, False) == (batched["ours"]["ours"], batched["none"]["ours"])


def test_identity_problem_reads_the_replica_out_of_its_node_answer() -> None:
    """A node's answer holds one check per replica: ours is no problem, a foreign listener is its
    detail, and a node that did not answer names the step's problem."""
    unit = Placed("small", ("n1",), (0,), 1)
    assert identity_problem(unit, {"n1": {"node": "n1", "checks": {"small-1": {"ours": True}}}}, None) is None
    assert "pid 9" == identity_problem(unit, {"n1": {"checks": {"small-1": {"ours": False, "detail": "pid 9"}}}}, None)
    assert "exit 1" in str(identity_problem(unit, {}, "identity-1: exit 1"))


@pytest.mark.parametrize("program", ["python3", "sh", "no-such-program-here", "/bin/sh", "./nothing"])
def test_the_launchers_which_finds_what_shutil_which_finds(program) -> None:
    """The launcher's own lookup (it does not import shutil) agrees with shutil.which on a PATH,
    on an empty PATH, and for names with a directory part."""
    for path in (os.environ.get("PATH", ""), "", "/nonexistent:/usr/bin:/bin"):
        assert shutil.which(program, path=path) == which(program, path)


class RecordingRunner:
    """A step runner that records each on-node command and answers with the lines given."""

    def __init__(self, answers: dict) -> None:
        self.answers, self.calls = answers, []

    def on_nodes(self, nodes, command, name, timeout_s, role="scan"):
        self.calls.append((nodes, command[0], name, json.loads(open(command[1]).read())["nodes"]))
        return self.answers, None


@pytest.mark.timeout(60)
def test_the_supervisors_own_node_is_checked_without_a_step_and_the_others_in_one(tmp_path) -> None:
    """The identity check of a replica on the supervisor's node (SLURMD_NODENAME) answers from this
    process what the on-node check answers, with no step; the other nodes' requests, and only
    theirs, go to one step; a remote line naming the supervisor's node does not replace its answer."""
    from types import SimpleNamespace

    from dd_slurm.runtime.replica_checks import node_answers

    with listening_child() as (port, identity):
        here = {"small-0": {"port": port, **identity}}
        there = {"small-1": {"port": 1, "pid": 1, "start_time": 1, "pgid": 1}}
        remote = {"n2": {"node": "n2", "checks": {"small-1": {"ours": True}}}, "localhost": {"node": "localhost"}}
        runner = RecordingRunner(remote)
        (tmp_path / "steps").mkdir()
        s = SimpleNamespace(ambient={"SLURMD_NODENAME": "localhost"}, dir=tmp_path, prepared=SimpleNamespace(runner=runner))
        alone = node_answers(s, {"localhost": here}, "identity-1")  # type: ignore[arg-type]
        both = node_answers(s, {"localhost": here, "n2": there}, "identity-2")  # type: ignore[arg-type]
        local = {"node": "localhost", "checks": check_listeners(here, "127.0.0.1")}
        assert ((({"localhost": local}, None)), ({"localhost": local, "n2": remote["n2"]}, None),
                [(("n2",), "_identity", "identity-2", {"n2": there})], True) == \
            (alone, both, runner.calls, local["checks"]["small-0"]["ours"])
