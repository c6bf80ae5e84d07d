"""The fake model server behaves like vLLM's OpenAI-compatible server, faults included."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dd_slurm.testing.fake_model import FifoSlots
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


def test_capacity_serves_n_at_once_and_queues_the_rest(procs) -> None:
    """--capacity 2: of 6 concurrent requests at most 2 are served at a time, none is refused,
    and /stats counts every completion request received."""
    port = free_port()
    procs.append(start("--port", str(port), "--capacity", "2", "--latency-s", "0.2"))
    wait_serving(port)
    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda i: get(port, "/v1/completions", {"prompt": f"p{i}"})[0], range(6)))
    stats = json.loads(get(port, "/stats")[1])
    assert ([200] * 6, 6, 2, 0) == (statuses, stats["requests"], stats["peak_serving"], stats["serving"])


def test_api_key_variable_guards_v1_like_vllm(procs) -> None:
    """With --api-key-var set in the environment, /v1/* without the Bearer key is 401; /health and
    /stats stay open; the right key is served."""
    port = free_port()
    env = {**os.environ, "FAKE_KEY": "s3cret"}
    procs.append(subprocess.Popen([*SERVER, "--host", "127.0.0.1", "--port", str(port), "--api-key-var", "FAKE_KEY"],
                                  stderr=subprocess.PIPE, text=True, env=env))
    wait_serving(port)
    with pytest.raises(urllib.error.HTTPError) as refused_error:
        get(port, "/v1/models")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": "Bearer s3cret"})
    with urllib.request.urlopen(request, timeout=5) as response:
        allowed = response.status
    assert (401, 200, 200, 200) == (refused_error.value.code, get(port, "/health")[0], get(port, "/stats")[0], allowed)


def test_request_log_has_one_line_per_completion_request(procs, tmp_path) -> None:
    """--request-log appends one line per completion request with the prompt's digest."""
    port, log_file = free_port(), tmp_path / "requests.jsonl"
    procs.append(start("--port", str(port), "--request-log", str(log_file)))
    wait_serving(port)
    for prompt in ("a", "b", "a"):
        get(port, "/v1/completions", {"prompt": prompt})
    get(port, "/v1/models")
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    digests = [hashlib.sha256(p.encode()).hexdigest() for p in ("a", "b", "a")]
    assert ([1, 2, 3], digests) == ([l["n"] for l in lines], [l["prompt_sha256"] for l in lines])


def test_streaming_answers_server_sent_events(procs) -> None:
    """`"stream": true` answers text/event-stream, chunked, ending in `data: [DONE]`; the words
    joined are the non-streamed reply."""
    port = free_port()
    procs.append(start("--port", str(port), "--model", "m"))
    wait_serving(port)
    body = {"messages": [{"role": "user", "content": "hi"}]}
    plain = json.loads(get(port, "/v1/chat/completions", body)[1])["choices"][0]["message"]["content"]
    status, raw = get(port, "/v1/chat/completions", {**body, "stream": True})
    events = [line[len("data: "):] for line in raw.decode().split("\n\n") if line]
    words = "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1])
    assert (200, "[DONE]", plain) == (status, events[-1], words.rstrip(" "))


def test_stall_after_requests_holds_requests_while_health_answers(procs) -> None:
    """--stall-after-requests 1: the second completion never answers, /health still does."""
    port = free_port()
    procs.append(start("--port", str(port), "--stall-after-requests", "1"))
    wait_serving(port)
    get(port, "/v1/completions", {"prompt": "first"})
    with pytest.raises(socket.timeout):
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=b'{"prompt": "x"}')
        urllib.request.urlopen(request, timeout=0.5)
    assert 200 == get(port, "/health")[0]


@pytest.mark.timeout(10)
def test_capacity_queue_is_first_come_first_served() -> None:
    """A released slot goes to the request already waiting, not to one that comes at that moment
    (vLLM's queue is FIFO): the holder releases and at once asks again, yet the waiter goes first."""
    slots, order = FifoSlots(1), []

    def waiter() -> None:
        with slots:
            order.append("waiting since before the release")

    slots.__enter__()
    thread = threading.Thread(target=waiter)
    thread.start()
    while not slots.waiting:
        time.sleep(0.001)
    slots.__exit__(None, None, None)
    with slots:
        order.append("came at the release")
    thread.join()
    assert ["waiting since before the release", "came at the release"] == order
