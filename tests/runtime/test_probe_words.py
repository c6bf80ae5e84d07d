"""A health probe that fails says why in a person's words: the status and the path it asked
(`HTTP 404 on /healthz: check health_path`), `connection refused`, `no answer within 0.5s`; never
the exception's class and errno. Real sockets on loopback."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from dd_slurm.runtime.probes import probe_health
from dd_slurm.store.readiness import probe_summary
from tests.runtime.harness import free_port


class Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = HTTPServer(("127.0.0.1", 0), Health)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.timeout(20)
def test_a_wrong_health_path_says_the_status_and_path(server: int) -> None:
    """The server answers 404 on the configured path: the summary names both and the key to fix."""
    probe = probe_health("127.0.0.1", server, "/healthz")
    assert ("HTTP 404 on /healthz: check health_path", None) == (probe_summary(probe), probe_summary(
        probe_health("127.0.0.1", server, "/health")))


@pytest.mark.timeout(20)
def test_nothing_listening_is_connection_refused() -> None:
    """A closed port: `connection refused`, not `ConnectionRefusedError: [Errno 111] ...`."""
    assert "connection refused" == probe_summary(probe_health("127.0.0.1", free_port(), "/health"))


@pytest.mark.timeout(20)
def test_a_server_that_never_answers_is_no_answer_within_the_timeout() -> None:
    """A listener that accepts and says nothing: `no answer within 0.2s`."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        assert "no answer within 0.2s" == probe_summary(probe_health("127.0.0.1", port, "/health", timeout_s=0.2))


@pytest.mark.parametrize(("probe", "expected"), [
    (None, None),
    ({"ok": True, "status": 200, "error": None, "path": "/health"}, None),
    ({"ok": False, "status": 503, "error": None, "path": "/health"}, "HTTP 503 on /health"),
    ({"ok": False, "status": 404, "error": None}, "HTTP 404: check health_path"),  # a record from before `path`
    ({"ok": False, "status": None, "error": "connection refused"}, "connection refused"),
    ({"ok": False, "status": None, "error": None}, "no answer"),
])
def test_probe_summary(probe, expected) -> None:
    """Every shape of a recorded probe, including records written before probes carried `path`."""
    assert expected == probe_summary(probe)
