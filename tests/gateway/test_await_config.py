"""`--await-config`: the runtime starts the gateway while the servers load and writes its config
once every replica is ready. Until then the gateway listens nowhere; once it is written it serves."""

from __future__ import annotations

import os
import signal

import pytest

from tests.gateway.backends import Backend, Client, Gateway, answer, replica

pytestmark = pytest.mark.timeout(60)


def _waiting(gateway: Gateway) -> str:
    """Its first log line, once it is past its imports, has its signal handlers in place and waits
    for the config."""
    line = gateway.proc.stderr.readline()
    assert " waiting for " in line, line
    return line


def test_waits_listening_nowhere_then_serves_once_its_config_is_written(tmp_path) -> None:
    """Before the config exists: the process runs, has written no state file and holds no socket.
    After the config is written: it publishes its port and forwards a request."""
    backend = Backend(answer())
    gateway = Gateway(tmp_path, {"m": [replica(backend)]}, awaits=True)
    try:
        _waiting(gateway)
        before = (gateway.proc.poll(), gateway.state_path.exists(), _sockets(gateway.proc.pid))
        gateway.route()
        client = Client(gateway.wait_serving().port)
        status = client.request("/m/v1/completions")[0]
        client.close()
    finally:
        code = gateway.stop()
        backend.close()
    assert ((None, False, 0), 200, 0) == (before, status, code)


def test_sigterm_while_waiting_ends_it_with_exit_0_and_no_state(tmp_path) -> None:
    """Cleanup during `deploying` stops a gateway that never got its config: exit 0, one log line
    saying so, no state or stats file."""
    gateway = Gateway(tmp_path, {"m": [replica(1)]}, awaits=True)
    _waiting(gateway)
    gateway.proc.send_signal(signal.SIGTERM)
    code = gateway.proc.wait(10)
    log = gateway.proc.stderr.read()
    assert (0, True, False, False) == (code, log.rstrip().endswith("stopped before its config was written"),
                                       gateway.state_path.exists(), gateway.stats_path.exists())


def _sockets(pid: int) -> int:
    """How many sockets the process holds open."""
    fds = os.listdir(f"/proc/{pid}/fd")
    return sum(1 for fd in fds if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"))
