"""Scripted HTTP/1.1 backends on loopback sockets, a gateway process, and a raw client, for the
gateway tests. Each backend records every request it received, byte for byte."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def read_message(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """One request (head + Content-Length or chunked body) from `sock`; None at EOF."""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    end = buffer.index(b"\r\n\r\n") + 4
    head = bytes(buffer[:end])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while b"\r\n0\r\n\r\n" not in buffer[end - 2:]:
            buffer += sock.recv(65536)
        total = buffer.index(b"\r\n0\r\n\r\n", end - 2) + 7
    else:
        length = 0
        for line in lower.split(b"\r\n"):
            if line.startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        total = end + length
        while len(buffer) < total:
            buffer += sock.recv(65536)
    message = bytes(buffer[:total])
    del buffer[:total]
    return message


def wait_for(predicate, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.01)


def response(status: int = 200, body: bytes = b'{"ok": true}', headers: tuple[str, ...] = ()) -> bytes:
    lines = [f"HTTP/1.1 {status} X", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


Behaviour = Callable[[socket.socket, bytes, int], bool]  # (conn, request, number) -> keep the connection


def answer(status: int = 200, body: bytes = b'{"ok": true}', headers: tuple[str, ...] = (),
           delay: float = 0.0) -> Behaviour:
    def behave(conn: socket.socket, _request: bytes, _n: int) -> bool:
        time.sleep(delay)
        conn.sendall(response(status, body, headers))
        return True

    return behave


def close_after_read(conn: socket.socket, _request: bytes, _n: int) -> bool:
    conn.close()
    return False


class Backend:
    """A listening socket whose connections are served by `behaviour`, each in its own thread."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self.connections = 0
        self.closed = 0  # connections this backend has closed
        self.release = threading.Event()  # behaviours that hold a request wait on this
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def hold(self, status: int = 200) -> Behaviour:
        """A behaviour: answer only once `release` is set."""
        def behave(conn: socket.socket, _request: bytes, _n: int) -> bool:
            self.release.wait(30)
            conn.sendall(response(status))
            return True

        return behave

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = bytearray()
        try:
            while True:
                request = read_message(conn, buffer)
                if request is None:
                    return
                with self.lock:
                    self.requests.append(request)
                    number = len(self.requests)
                if not self.behaviour(conn, request, number):
                    return
        except OSError:
            return
        finally:
            conn.close()
            with self.lock:
                self.closed += 1

    def close(self) -> None:
        self.release.set()
        self.listener.close()


def closed_port() -> int:
    """A loopback port nobody listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Gateway:
    """`python -m dd_slurm.gateway CONFIG` in a throwaway process. `awaits`: started with
    `--await-config`, its config written (atomically) only by `route()`, as the runtime does."""

    def __init__(self, tmp: Path, aliases: dict[str, list[dict]], env: dict[str, str] | None = None,
                 awaits: bool = False, **settings) -> None:
        self.state_path, self.stats_path = tmp / "gateway-state.json", tmp / "gateway-stats.json"
        self.config_path = tmp / "gateway.json"
        self.config = {"schema": 1, "listen": {"host": "127.0.0.1", "port": 0},
                       "aliases": {a: {"replicas": r} for a, r in aliases.items()},
                       "state_path": str(self.state_path), "stats_path": str(self.stats_path), **settings}
        if not awaits:
            self.route()
        environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), **(env or {})}
        flag = ["--await-config"] if awaits else []
        self.proc = subprocess.Popen([sys.executable, "-m", "dd_slurm.gateway", *flag, str(self.config_path)],
                                     env=environ, stderr=subprocess.PIPE, text=True)
        self.port = 0

    def route(self) -> None:
        partial = self.config_path.with_suffix(".partial")
        partial.write_text(json.dumps(self.config))
        partial.replace(self.config_path)

    def wait_serving(self, seconds: float = 10) -> Gateway:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}: {self.proc.stderr.read()}")
            try:
                state = json.loads(self.state_path.read_text())
            except (OSError, ValueError):
                time.sleep(0.02)
                continue
            self.port = state["port"]
            return self
        raise AssertionError("gateway never published its port")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(10)

    def state(self) -> dict:
        return json.loads(self.state_path.read_text())

    def stats(self) -> dict:
        return json.loads(self.stats_path.read_text())


def replica(backend: Backend | int, index: int = 0, deployment: str = "d", max_inflight: int = 256) -> dict:
    url = backend.base_url if isinstance(backend, Backend) else f"http://127.0.0.1:{backend}/v1"
    return {"deployment": deployment, "replica": index, "base_url": url, "max_inflight": max_inflight}


class Client:
    """A raw keep-alive HTTP/1.1 client on one connection."""

    def __init__(self, port: int, timeout: float = 10) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = bytearray()

    def send(self, path: str, body: bytes | None = b'{"prompt": "x"}', headers: tuple[str, ...] = (),
             method: str = "POST") -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: gateway", *headers]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))

    def receive(self) -> tuple[int, dict[str, str], bytes]:
        """Status, headers (lower-case names) and the de-chunked body of the next response."""
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        end = self.buffer.index(b"\r\n\r\n")
        lines = bytes(self.buffer[:end]).decode().split("\r\n")
        del self.buffer[:end + 4]
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                while b"\r\n" not in self.buffer:
                    self._more()
                size = int(self.buffer[:self.buffer.index(b"\r\n")], 16)
                del self.buffer[:self.buffer.index(b"\r\n") + 2]
                while len(self.buffer) < size + 2:
                    self._more()
                body += bytes(self.buffer[:size])
                del self.buffer[:size + 2]
                if size == 0:
                    break
        else:
            length = int(headers.get("content-length", 0))
            while len(self.buffer) < length:
                self._more()
            body = bytes(self.buffer[:length])
            del self.buffer[:length]
        return int(lines[0].split(" ")[1]), headers, body

    def request(self, path: str, body: bytes | None = b'{"prompt": "x"}', headers: tuple[str, ...] = (),
                method: str = "POST") -> tuple[int, dict[str, str], bytes]:
        self.send(path, body, headers, method)
        return self.receive()

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("gateway closed the connection")
        self.buffer += data

    def close(self) -> None:
        self.sock.close()
