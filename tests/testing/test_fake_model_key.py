"""The fake model server's API key, as vLLM's VLLM_API_KEY: /v1/* needs `Authorization: Bearer`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.runtime.harness import free_port
from tests.testing.test_fake_model import wait_serving

SERVER = [sys.executable, str(Path(__file__).resolve().parents[2] / "dd_slurm" / "testing" / "fake_model.py")]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def status(port: int, path: str, key: str | None = None, body: dict | None = None) -> int:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers,
                                     data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture
def server():
    started = []

    def start(env: dict) -> int:
        port = free_port()
        started.append(subprocess.Popen([*SERVER, "--host", "127.0.0.1", "--port", str(port), "--model", "m",
                                         "--api-key-env", "TEST_KEY"], env={"PATH": os.environ["PATH"], **env}))
        wait_serving(port)
        return port

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(30)
def test_key_required_on_v1_when_the_variable_is_set(server) -> None:
    """With TEST_KEY set: /health open; /v1/models and chat completions 401 without the key or with
    a wrong one, 200 with it."""
    port = server({"TEST_KEY": "k-123"})
    assert [200, 401, 401, 200, 401, 200] == [
        status(port, "/health"), status(port, "/v1/models"), status(port, "/v1/models", "wrong"),
        status(port, "/v1/models", "k-123"), status(port, "/v1/chat/completions", body=CHAT),
        status(port, "/v1/chat/completions", "k-123", CHAT)]


@pytest.mark.timeout(30)
def test_no_key_when_the_variable_is_unset(server) -> None:
    """Without the variable the server is open, as vLLM without VLLM_API_KEY."""
    port = server({})
    assert [200, 200] == [status(port, "/v1/models"), status(port, "/v1/chat/completions", body=CHAT)]
