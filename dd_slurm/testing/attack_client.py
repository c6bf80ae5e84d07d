"""A hostile client for tests, run as an attempt's client (standard library only): raw-socket
attacks on the attempt's gateway, one JSON line per attack in `--out` ({"attack", "held", "saw"}).
It exits 0 whatever it finds: the test reads the verdicts.

Attacks: request smuggling through `Connection: content-length`, a control character in the
request target, a key-less head sent slowly (the header timeout must cut it), a key-less head
announcing a large body (401 before any body byte), a keyed request abandoned in flight (the
gateway counts `client_gone`), a slow keyed upload longer than the stall timeout (answered, the
replica not stalled), and key-less stats (401). A last keyed request shows the gateway still serves."""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from urllib.parse import urlsplit


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="attack_client")
    p.add_argument("--endpoints", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--alias", required=True)
    p.add_argument("--api-key-env", default="OPENAI_API_KEY")
    p.add_argument("--header-timeout-s", type=float, required=True)
    p.add_argument("--upload-s", type=float, required=True, help="how long the slow upload takes")
    return p.parse_args(argv)


class Target:
    def __init__(self, url: str, key: str) -> None:
        parts = urlsplit(url)
        self.host, self.port, self.prefix = parts.hostname or "", parts.port or 80, parts.path.rstrip("/")
        self.key = key

    def connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=30)

    def head(self, path: str, *lines: str, keyed: bool = True) -> bytes:
        auth = [f"Authorization: Bearer {self.key}"] if keyed else []
        return ("\r\n".join([f"POST {self.prefix}{path} HTTP/1.1", f"Host: {self.host}", *auth, *lines])
                + "\r\n\r\n").encode()


def read_until_close(sock: socket.socket, limit_s: float = 30) -> bytes:
    sock.settimeout(limit_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    return data


def exchange(target: Target, data: bytes) -> bytes:
    with target.connect() as sock:
        sock.sendall(data)
        return read_until_close(sock)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def completion(prompt: str) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 4}).encode()


def smuggling(target: Target) -> tuple[bool, str]:
    inner = completion("SMUGGLED")
    smuggled = (f"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: {len(inner)}\r\n\r\n").encode() + inner
    outer = target.head("/completions", "Connection: content-length", f"Content-Length: {len(smuggled)}")
    answer = exchange(target, outer + smuggled)
    return status(answer) == 400, answer[:60].decode(errors="replace")


def control_character(target: Target) -> tuple[bool, str]:
    body = completion("ctl")
    head = target.head("/completions\x00x", f"Content-Length: {len(body)}")
    answer = exchange(target, head + body)
    return status(answer) == 400, answer[:60].decode(errors="replace")


def slow_keyless_head(target: Target, header_timeout_s: float) -> tuple[bool, str]:
    began = time.monotonic()
    with target.connect() as sock:
        try:
            sock.sendall(f"POST {target.prefix}/completions HTTP/1.1\r\nHost: {target.host}\r\n".encode())
            while time.monotonic() - began < header_timeout_s * 4:
                sock.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.1)
        except OSError:
            pass
        answer = read_until_close(sock, header_timeout_s * 4)
    took = time.monotonic() - began
    return status(answer) == 408 and took < header_timeout_s * 3, f"{status(answer)} after {took:.2f}s"


def large_keyless_body(target: Target) -> tuple[bool, str]:
    head = target.head("/completions", "Expect: 100-continue", "Content-Length: 100000000", keyed=False)
    began = time.monotonic()
    answer = exchange(target, head)
    took = time.monotonic() - began
    return status(answer) == 401 and b"100 Continue" not in answer and took < 5, f"{status(answer)} after {took:.2f}s"


def abandoned_request(target: Target) -> tuple[bool, str]:
    body = completion("ABANDONED")
    with target.connect() as sock:
        sock.sendall(target.head("/completions", f"Content-Length: {len(body)}") + body)
        time.sleep(0.5)  # in flight at the replica (its latency is longer)
    time.sleep(0.5)
    gone = stats(target).get("errors", {}).get("client_gone", 0)
    return gone >= 1, f"client_gone={gone}"


def slow_upload(target: Target, upload_s: float) -> tuple[bool, str]:
    body = completion("UPLOAD " + "x" * (3 << 20))
    pieces = 30
    step = len(body) // pieces + 1
    with target.connect() as sock:
        sock.sendall(target.head("/completions", f"Content-Length: {len(body)}"))
        for offset in range(0, len(body), step):
            sock.sendall(body[offset:offset + step])
            time.sleep(upload_s / pieces)
        sock.settimeout(30)
        answer = sock.recv(65536)
    return status(answer) == 200, answer[:60].decode(errors="replace")


def keyless_stats(target: Target) -> tuple[bool, str]:
    head = f"GET /_gateway/stats HTTP/1.1\r\nHost: {target.host}\r\n\r\n".encode()
    answer = exchange(target, head)
    return status(answer) == 401 and str(target.port).encode() not in answer.split(b"\r\n\r\n", 1)[-1], \
        answer[:60].decode(errors="replace")


def still_serving(target: Target) -> tuple[bool, str]:
    body = completion("AFTER")
    answer = exchange(target, target.head("/completions", f"Content-Length: {len(body)}", "Connection: close") + body)
    return status(answer) == 200, answer[:60].decode(errors="replace")


def stats(target: Target) -> dict:
    head = (f"GET /_gateway/stats HTTP/1.1\r\nHost: {target.host}\r\nAuthorization: Bearer {target.key}\r\n"
            "Connection: close\r\n\r\n").encode()
    answer = exchange(target, head)
    alias = target.prefix.strip("/").split("/")[0]
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])["aliases"][alias]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with open(args.endpoints) as handle:
        url = json.load(handle)["models"][args.alias]["url"]
    target = Target(url, os.environ.get(args.api_key_env, ""))
    attacks = {"smuggling": lambda: smuggling(target), "control_character": lambda: control_character(target),
               "slow_keyless_head": lambda: slow_keyless_head(target, args.header_timeout_s),
               "large_keyless_body": lambda: large_keyless_body(target),
               "abandoned_request": lambda: abandoned_request(target),
               "slow_upload": lambda: slow_upload(target, args.upload_s),
               "keyless_stats": lambda: keyless_stats(target), "still_serving": lambda: still_serving(target)}
    with open(args.out, "w") as out:
        for name, attack in attacks.items():
            try:
                held, saw = attack()
            except OSError as err:
                held, saw = False, f"{type(err).__name__}: {err}"
            out.write(json.dumps({"attack": name, "held": held, "saw": saw}) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
