"""The fake model server behaves like vLLM's OpenAI-compatible server, faults included."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.runtime.harness import free_port

SERVER = [sys.executable, str(Path(__file__).resolve().parents[2] / "dd_slurm" / "testing" / "fake_model.py")]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*SERVER, "--host", "127.0.0.1", *args], stderr=subprocess.PIPE, text=True)


def get(port: int, path: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read()


def refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def wait_serving(port: int, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while refused(port):
        assert time.monotonic() < deadline, "server never listened"
        time.sleep(0.05)


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_refuses_while_loading_then_serves_the_openai_api(procs) -> None:
    """While loading the port is closed (no 503 phase); then /health is 200 with an empty body,
    /v1/models lists the model, and both completion APIs answer deterministically."""
    port = free_port()
    procs.append(start("--port", str(port), "--model", "m", "--load-time", "1"))
    time.sleep(0.4)
    assert refused(port)
    wait_serving(port)
    assert (200, b"") == get(port, "/health")
    assert ["m"] == [m["id"] for m in json.loads(get(port, "/v1/models")[1])["data"]]
    blocks = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    first = json.loads(get(port, "/v1/chat/completions", blocks)[1])["choices"][0]["message"]["content"]
    plain = json.loads(get(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})[1])
    assert first == plain["choices"][0]["message"]["content"]
    assert json.loads(get(port, "/v1/completions", {"prompt": "hi"})[1])["choices"][0]["text"].startswith("[m]")


def test_leader_serves_only_after_its_follower_joins(procs) -> None:
    """Multi-node: the leader stays closed until the follower joins; the follower opens no HTTP
    port; when the follower dies the leader exits with the rank-failure code."""
    port, coord = free_port(), free_port()
    procs.append(start("--port", str(port), "--role", "leader", "--num-nodes", "2", "--coord-port", str(coord)))
    time.sleep(0.8)
    assert refused(port)
    follower = subprocess.Popen([*SERVER, "--role", "follower", "--leader", "127.0.0.1", "--coord-port", str(coord),
                                 "--node-rank", "1"], stderr=subprocess.PIPE, text=True)
    procs.append(follower)
    wait_serving(port)
    follower.send_signal(signal.SIGKILL)
    assert 17 == procs[0].wait(timeout=10)


@pytest.mark.parametrize(("args", "expected"), [
    (["--fail-loading", "--exit-code", "3"], 3),
    (["--crash-after-s", "0.3", "--exit-code", "5"], 5),
])
def test_exit_faults(procs, args, expected) -> None:
    """Load failure and crash-after-N-seconds exit with the requested code."""
    procs.append(start("--port", str(free_port()), *args))
    assert expected == procs[0].wait(timeout=10)


def test_crash_after_n_requests(procs) -> None:
    """The server exits with the requested code after its Nth request."""
    port = free_port()
    procs.append(start("--port", str(port), "--crash-after-requests", "2", "--exit-code", "9"))
    wait_serving(port)
    for _ in range(2):
        get(port, "/v1/completions", {"prompt": "x"})
    assert 9 == procs[0].wait(timeout=10)


def test_ignoring_sigterm_for_a_while(procs) -> None:
    """With --ignore-sigterm-s, SIGTERM does not stop the server until that time has passed."""
    port = free_port()
    procs.append(start("--port", str(port), "--ignore-sigterm-s", "1.5"))
    wait_serving(port)
    procs[0].send_signal(signal.SIGTERM)
    time.sleep(0.7)
    assert procs[0].poll() is None
    assert 0 == procs[0].wait(timeout=10)


def test_never_healthy(procs) -> None:
    """--never-healthy keeps loading forever: the port never opens."""
    port = free_port()
    procs.append(start("--port", str(port), "--never-healthy"))
    time.sleep(1.0)
    assert refused(port) and procs[0].poll() is None


def test_follower_dies_after_a_while(procs) -> None:
    """A follower with --die-after-s exits with its code after joining; the leader then fails."""
    port, coord = free_port(), free_port()
    procs.append(start("--port", str(port), "--role", "leader", "--num-nodes", "2", "--coord-port", str(coord)))
    follower = subprocess.Popen([*SERVER, "--role", "follower", "--leader", "127.0.0.1", "--coord-port", str(coord),
                                 "--die-after-s", "0.5", "--exit-code", "4"], stderr=subprocess.PIPE, text=True)
    procs.append(follower)
    assert (4, 17) == (follower.wait(timeout=10), procs[0].wait(timeout=10))
