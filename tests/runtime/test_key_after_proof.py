"""The attempt's key goes only to a port proven ours: a readiness round (health probes, then the
identity check, then the keyed requests) against real throwaway HTTP servers that record the
Authorization header of every request they receive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.errors import AttemptFailure
from dd_slurm.plan.placement import Placed
from dd_slurm.runtime.actions import RuntimeActions
from dd_slurm.runtime.node.procfs import start_time
from dd_slurm.runtime.step_specs import StepSpec
from dd_slurm.store.readiness import Readiness

pytestmark = pytest.mark.timeout(30)

KEY = "attempt-key-under-test"
RECORDER = (  # argv: record file, key it wants ('' : none); 200 to all, model list on /v1/models
    "import http.server, json, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        auth = self.headers.get('Authorization')\n"
    "        with open(sys.argv[1], 'a') as out:\n"
    "            out.write(json.dumps([self.path, auth]) + '\\n')\n"
    "        wanted = sys.argv[2] and auth != 'Bearer ' + sys.argv[2]\n"
    "        body = b'{\"data\": [{\"id\": \"small-model\"}]}' if self.path == '/v1/models' else b'ok'\n"
    "        self.send_response(401 if wanted else 200)\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "server = http.server.HTTPServer(('127.0.0.1', 0), H)\n"
    "print(server.server_port, flush=True)\n"
    "server.serve_forever()\n"
)
UNIT = Placed("small", ("127.0.0.1",), (0,), 0)
LEADER = StepSpec(name="deploy-small-0", node="127.0.0.1", argv=("x",), values={}, env={}, deployment="small",
                  choose_port=True)


def recorder(started: list[subprocess.Popen], record: Path, wanted_key: str = "") -> tuple[subprocess.Popen, int]:
    popen = subprocess.Popen([sys.executable, "-c", RECORDER, str(record), wanted_key], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    started.append(popen)
    return popen, int(popen.stdout.readline())


def received(record: Path) -> list[list]:
    """[path, Authorization header or None] of every request the recorder answered, in order."""
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def actions_for(tmp_path: Path, launched: subprocess.Popen, port: int) -> RuntimeActions:
    """RuntimeActions waiting for one replica on this node (the supervisor's, SLURMD_NODENAME),
    whose leader step is `launched` and whose published port is `port`."""
    record = {"name": LEADER.name, "node": LEADER.node, "port": port, "pid": launched.pid,
              "start_time": start_time(launched.pid), "pgid": launched.pid}
    deployment = SimpleNamespace(health_path="/health", served_model="small-model", ready_timeout_s=60.0)
    prepared = SimpleNamespace(placement=(UNIT,), specs={UNIT.name: [LEADER]},
                               runner=SimpleNamespace(started=lambda _name: record))
    session = SimpleNamespace(gate=SimpleNamespace(check=lambda: None, received=None), clock=FakeClock(),
                              prepared=prepared, dir=tmp_path, table=SimpleNamespace(procs={}), api_key=KEY,
                              ambient={"SLURMD_NODENAME": UNIT.leader}, deployment=lambda _name: deployment)
    actions = RuntimeActions(session)  # type: ignore[arg-type]
    actions._readiness = Readiness.new(tmp_path, "a1", {UNIT.name: {"deployment": "small", "replica": 0}})
    actions.readiness.move(UNIT.name, "starting")
    actions.launches.ports[UNIT.name] = port
    actions.deadlines[UNIT.name] = session.clock.monotonic() + 60.0
    return actions


def test_a_foreign_server_on_the_replicas_port_never_receives_the_key(started, tmp_path) -> None:
    """A foreign process serves 200 on the port the replica published, while the launched
    process listens nowhere: the readiness round ends in server_identity, and the foreign
    server was probed but received no Authorization header at all."""
    launched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    started.append(launched)
    _foreign, port = recorder(started, tmp_path / "foreign.jsonl")
    with pytest.raises(AttemptFailure) as failure:
        actions_for(tmp_path, launched, port).deployments_ready()
    assert ("server_identity", [["/health", None]]) == (failure.value.reason, received(tmp_path / "foreign.jsonl"))


def test_our_own_server_gets_the_key_once_its_listener_is_proven_ours(started, tmp_path) -> None:
    """The launched process itself serves on the port: the health probe before the identity
    check carries no key; once proven ours, the keyed health probe and /v1/models carry it."""
    ours, port = recorder(started, tmp_path / "ours.jsonl")
    assert True is actions_for(tmp_path, ours, port).deployments_ready()
    assert [["/health", None], ["/health", f"Bearer {KEY}"], ["/v1/models", f"Bearer {KEY}"]] == \
        received(tmp_path / "ours.jsonl")


def test_a_server_whose_health_path_wants_the_key_is_ready_once_proven(started, tmp_path) -> None:
    """Our server answers 401 to requests without the key, its health path too: the keyless
    probe's 401 leads to the identity check, and the keyed probe's 200 makes it ready."""
    ours, port = recorder(started, tmp_path / "ours.jsonl", KEY)
    actions = actions_for(tmp_path, ours, port)
    assert (True, "ready") == (actions.deployments_ready(), actions.readiness.state(UNIT.name))
    assert [None, f"Bearer {KEY}", f"Bearer {KEY}"] == [auth for _path, auth in received(tmp_path / "ours.jsonl")]


def test_a_server_that_refuses_the_key_once_proven_is_server_identity(started, tmp_path) -> None:
    """Our process tree's server wants another key (401 with the attempt's): not ready with
    it, server_identity naming the health path and its answer."""
    ours, port = recorder(started, tmp_path / "ours.jsonl", "some-other-key")
    with pytest.raises(AttemptFailure) as failure:
        actions_for(tmp_path, ours, port).deployments_ready()
    assert ("server_identity", f"small-0: port {port} on 127.0.0.1: /health with the attempt key: answered 401") == \
        (failure.value.reason, failure.value.detail)


def test_the_keyless_probe_alone_never_sends_a_key(started, tmp_path) -> None:
    """probe_health, as the readiness round calls it with the attempt key, sends no header:
    the key it is given is only withheld (and a 401 counts as answering)."""
    from dd_slurm.runtime.probes import probe_health

    _server, port = recorder(started, tmp_path / "r.jsonl", KEY)
    answer = probe_health("127.0.0.1", port, "/health", KEY)
    assert ((True, 401), [["/health", None]]) == ((answer["ok"], answer["status"]), received(tmp_path / "r.jsonl"))
