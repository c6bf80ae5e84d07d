"""A vLLM-like OpenAI-compatible server, standard library only.

Lifecycle as vLLM's: while loading, the port is closed (connections refused; no 503 phase); once
loaded, `GET /health` is 200 with an empty body, `GET /v1/models` lists the model, and
`POST /v1/chat/completions` and `/v1/completions` answer deterministically. Multi-node: the leader
serves only after every follower has joined its coordination port; followers open no HTTP port and
exit when the leader goes away; the leader exits non-zero when a follower goes away.

Capacity as a GPU server has it: `--capacity N` requests are served at once, each taking
`--latency-s`; the rest wait unboundedly and are served first come, first served, as vLLM queues
them. With `--api-key-var NAME` and NAME set in its environment, `/v1/*` requires
`Authorization: Bearer <key>` (vLLM's VLLM_API_KEY). `GET /stats` counts the completion requests
received; `--request-log FILE` appends one line per such request. `"stream": true` answers
server-sent events, chunked.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

try:
    from dd_slurm.testing.fake_ranks import exit_later, gather_followers, log, run_follower
except ImportError:  # run by path from an attempt's bundle, where only this folder is on sys.path
    sys.dont_write_bytecode = True  # the bundle is checksummed: a .pyc written into it fails the next step's check
    from fake_ranks import exit_later, gather_followers, log, run_follower  # type: ignore


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake_model")
    p.add_argument("--model", default="fake-model")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--role", choices=["single", "leader", "follower"], default="single")
    p.add_argument("--num-nodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--leader", default="127.0.0.1", help="leader host (followers)")
    p.add_argument("--coord-port", type=int, default=0)
    p.add_argument("--join-timeout", type=float, default=120.0)
    p.add_argument("--load-time", type=float, default=0.0, help="seconds before serving")
    p.add_argument("--weights", default=None, help="a file or tree read whole while loading, as a server loads weights")
    p.add_argument("--crash-after-s", type=float, default=None, help="exit --exit-code this long after serving")
    p.add_argument("--crash-after-requests", type=int, default=None)
    p.add_argument("--exit-code", type=int, default=1, help="exit code of a crash or a load failure")
    p.add_argument("--fail-loading", action="store_true", help="exit --exit-code at the end of loading")
    p.add_argument("--fail-loading-if", default="", help="A=B: --fail-loading when A equals B ({shard_index}=3)")
    p.add_argument("--ignore-sigterm-s", type=float, default=0.0, help="after SIGTERM, keep running this long")
    p.add_argument("--never-healthy", action="store_true", help="keep loading forever")
    p.add_argument("--die-after-s", type=float, default=None, help="follower: exit --exit-code after this")
    p.add_argument("--capacity", type=int, default=None, help="requests served at once; the rest wait")
    p.add_argument("--latency-s", type=float, default=0.0, help="time each completion takes")
    p.add_argument("--api-key-var", "--api-key-env", dest="api_key_var", default=None,
                   help="environment variable holding the key /v1/* requires (vLLM's VLLM_API_KEY)")
    p.add_argument("--request-log", default=None, help="append one JSON line per completion request")
    p.add_argument("--stats-out", default=None,
                   help="on SIGTERM, write the /stats document (requests, tokens) to FILE.<DD_SLURM_ROLE>.json")
    p.add_argument("--stall-after-requests", type=int, default=None, help="requests after the Nth never answer")
    p.add_argument("--faults-for", default=None,
                   help="apply the crash, stall and load faults only in the step with this DD_SLURM_ROLE (one replica)")
    args = p.parse_args(argv)
    if args.faults_for is not None and os.environ.get("DD_SLURM_ROLE") != args.faults_for:
        args.crash_after_s = args.crash_after_requests = args.stall_after_requests = None
        args.fail_loading = False
    return args


AT_EXIT: list = []  # what SIGTERM does before the process exits (--stats-out)


def install_sigterm(ignore_s: float) -> None:
    def on_term(_signo: int, _frame: object) -> None:
        if ignore_s <= 0:
            log("SIGTERM: exiting")
            for action in AT_EXIT:
                action()
            os._exit(0)
        log(f"SIGTERM: ignoring for {ignore_s}s")
        threading.Timer(ignore_s, lambda: os._exit(0)).start()

    signal.signal(signal.SIGTERM, on_term)


def completion_text(model: str, prompt: str) -> str:
    digest = hashlib.sha256(f"{model}\n{prompt}".encode()).hexdigest()[:12]
    return f"[{model}] reply {digest} to: {prompt[:60]}"


def prompt_of(body: dict) -> str:
    if "messages" in body:
        parts = []
        for message in body["messages"]:
            content = message.get("content", "")
            if isinstance(content, list):
                content = "".join(b.get("text", "") for b in content if b.get("type") == "text")
            parts.append(str(content))
        return "\n".join(parts)
    prompt = body.get("prompt", "")
    return prompt if isinstance(prompt, str) else json.dumps(prompt)


class Handler(BaseHTTPRequestHandler):
    server: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:
        return

    def reply(self, status: int, body: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self._headers_buffer.append(b"\r\n" + body)  # type: ignore[attr-defined]  # http.server internal  # head and body in one send, as uvicorn writes them
        self.flush_headers()

    def authorized(self) -> bool:
        """vLLM's check: with a key set, /v1/* needs `Authorization: Bearer <key>` (else 401)."""
        key = self.server.api_key
        if not key or not self.path.startswith("/v1") or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self.reply(401, json.dumps({"error": "Unauthorized"}).encode())
        return False

    def do_GET(self) -> None:
        if not self.authorized():
            return
        if self.path == "/health":
            self.reply(200, b"", "text/plain")
        elif self.path == "/stats":
            self.reply(200, json.dumps(self.server.stats()).encode())
        elif self.path == "/metrics":
            self.reply(200, self.server.exposition(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "dd-slurm-fake",
                     "root": self.server.model, "max_model_len": 4096}
            self.reply(200, json.dumps({"object": "list", "data": [model]}).encode())
        else:
            self.reply(404, json.dumps({"detail": "Not Found"}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.reply(400, json.dumps({"error": {"message": "invalid JSON"}}).encode())
            return
        if not self.authorized():
            return
        if self.path not in ("/v1/chat/completions", "/v1/completions"):
            self.reply(404, json.dumps({"detail": "Not Found"}).encode())
            return
        number = self.server.count_request(self.path, body)
        answer = self.server.answer(self.path, body)
        tokens = answer["usage"]["completion_tokens"]
        with self.server.slot():
            if self.server.args.stall_after_requests is not None and number > self.server.args.stall_after_requests:
                threading.Event().wait()  # a hung engine: the request is held, /health still answers
            self.server.decode(tokens, self.server.args.latency_s)
        self.server.finish(answer["usage"]["prompt_tokens"], tokens)
        if body.get("stream") is True:
            self.stream(answer)
        else:
            self.reply(200, json.dumps(answer).encode())

    def stream(self, answer: dict) -> None:
        """Server-sent events, one chunk each, as vLLM streams: the text word by word, then [DONE]."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        choice = answer["choices"][0]
        text = choice["text"] if "text" in choice else choice["message"]["content"]
        for word in text.split(" "):
            piece = {"text": word + " "} if "text" in choice else {"delta": {"content": word + " "}}
            event = {"id": answer["id"], "object": f"{answer['object']}.chunk", "model": answer["model"],
                     "choices": [{"index": 0, **piece, "finish_reason": None}]}
            self.chunk(f"data: {json.dumps(event)}\n\n".encode())
        self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class FifoSlots:
    """At most `capacity` holders; the others wait in the order they came. A release hands its
    slot to the oldest waiter, so a newcomer never takes it first (a threading.Semaphore lets a
    running thread barge in ahead of those already waiting, which vLLM's queue does not)."""

    def __init__(self, capacity: int) -> None:
        self.free = capacity
        self.lock = threading.Lock()
        self.waiting: collections.deque[threading.Lock] = collections.deque()

    def __enter__(self) -> None:
        with self.lock:
            if self.free and not self.waiting:
                self.free -= 1
                return
            turn = threading.Lock()
            turn.acquire()
            self.waiting.append(turn)
        turn.acquire()  # released by the holder that hands its slot on

    def __exit__(self, *_exc: object) -> None:
        with self.lock:
            if self.waiting:
                self.waiting.popleft().release()
            else:
                self.free += 1


class ModelServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # a listen backlog for hundreds of concurrent clients, as uvicorn's 2048

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__((args.host, args.port), Handler)
        self.model = args.model
        self.args = args
        self.requests = 0
        self.by_path: dict[str, int] = {}
        self.serving = self.peak_serving = 0
        self.waiting = 0
        self.prompt_tokens = self.generation_tokens = self.succeeded = 0  # vLLM's counters, served at /metrics
        self.lock = threading.Lock()
        self.slots = FifoSlots(args.capacity) if args.capacity else contextlib.nullcontext()
        self.api_key = os.environ.get(args.api_key_var) if args.api_key_var else None

    @contextlib.contextmanager
    def slot(self):
        """Held while a request is served: at most --capacity at once, the others wait their turn."""
        with self.lock:
            self.waiting += 1
        with self.slots:
            with self.lock:
                self.waiting -= 1
                self.serving += 1
                self.peak_serving = max(self.peak_serving, self.serving)
            try:
                yield
            finally:
                with self.lock:
                    self.serving -= 1

    def count_request(self, path: str, body: dict) -> int:
        with self.lock:
            self.requests += 1
            self.by_path[path] = self.by_path.get(path, 0) + 1
            number = self.requests
            if self.args.request_log:
                prompt = prompt_of(body)
                line = json.dumps({"n": number, "role": os.environ.get("DD_SLURM_ROLE"), "path": path,
                                   "prompt_sha256": hashlib.sha256(
                    prompt.encode()).hexdigest(), "prompt": prompt[:200], "t": time.time()}) + "\n"
                with open(self.args.request_log, "a") as handle:
                    handle.write(line)
            limit = self.args.crash_after_requests
            if limit is not None and self.requests >= limit:
                exit_later(0.05, self.args.exit_code, f"crash after {self.requests} requests")
        return number

    def early_tokens(self, tokens: int) -> int:
        """How many of a request's tokens the counter shows before it ends: all but the last, spread
        over its latency, when that is 0.2 s or more (a short one counts them at its end)."""
        return max(tokens - 1, 0) if self.args.latency_s >= 0.2 else 0

    def decode(self, tokens: int, seconds: float) -> None:
        """`seconds` of generation, the generation counter moving as it goes (as an engine's moves
        with each decode step), the last token counted when the request ends."""
        early = self.early_tokens(tokens)
        step = seconds / max(tokens, 1)
        for _ in range(early):
            time.sleep(step)
            with self.lock:
                self.generation_tokens += 1
        time.sleep(max(0.0, seconds - step * early))

    def finish(self, prompt_tokens: int, tokens: int) -> None:
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += tokens - self.early_tokens(tokens)
            self.succeeded += 1

    def exposition(self) -> bytes:
        """vLLM's own metric names (what the gateway aggregates and watches for progress)."""
        model = self.model.replace("\\", "").replace('"', "")
        label = '{model_name="' + model + '"}'
        with self.lock:
            values = [("num_requests_running", "gauge", self.serving), ("num_requests_waiting", "gauge", self.waiting),
                      ("prompt_tokens_total", "counter", self.prompt_tokens),
                      ("generation_tokens_total", "counter", self.generation_tokens),
                      ("request_success_total", "counter", self.succeeded)]
        lines = []
        for name, kind, value in values:
            lines += [f"# HELP vllm:{name} {name.replace('_', ' ')}", f"# TYPE vllm:{name} {kind}",
                      f"vllm:{name}{label} {float(value)}"]
        return ("\n".join(lines) + "\n").encode()

    def stats(self) -> dict:
        with self.lock:
            return {"requests": self.requests, "by_path": dict(self.by_path), "serving": self.serving,
                    "peak_serving": self.peak_serving, "prompt_tokens": self.prompt_tokens,
                    "generation_tokens": self.generation_tokens}

    def answer(self, path: str, body: dict) -> dict:
        text = completion_text(self.model, prompt_of(body))
        usage = {"prompt_tokens": 1, "completion_tokens": len(text.split()), "total_tokens": 1 + len(text.split())}
        if path == "/v1/completions":
            choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
            return {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": self.model,
                    "choices": [choice], "usage": usage}
        message = {"role": "assistant", "content": text}
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}], "usage": usage}


def load_weights(path: str, exit_code: int) -> None:
    """Read every byte of the weights (a file, or a tree's files in order); say where and how much."""
    top = Path(path)
    found = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else []
    if not found:
        log(f"weights {path}: not found")
        sys.exit(exit_code)
    total = 0
    for file in found:
        with open(file, "rb") as handle:
            while chunk := handle.read(1 << 20):
                total += len(chunk)
    log(f"weights {path}: {len(found)} files, {total} bytes, {'writable' if writable(top) else 'read-only'}")


def writable(top: Path) -> bool:
    """Whether a file can be made beside the weights (removed again at once)."""
    probe = (top if top.is_dir() else top.parent) / f".fake-model-probe-{os.getpid()}"
    try:
        probe.touch()
    except OSError:
        return False
    probe.unlink()
    return True


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    install_sigterm(args.ignore_sigterm_s)
    if args.role == "follower":
        run_follower(args)
        return
    log(f"loading {args.model} ({args.load_time}s)")
    if args.weights is not None:
        load_weights(args.weights, args.exit_code)
    if args.role == "leader" and args.num_nodes > 1:
        gather_followers(args)
    time.sleep(args.load_time)
    while args.never_healthy:
        time.sleep(3600)
    left, equals, right = args.fail_loading_if.partition("=")
    if args.fail_loading or (equals and left == right):
        log("load failed")
        sys.exit(args.exit_code)
    server = ModelServer(args)
    if args.stats_out:
        role = os.environ.get("DD_SLURM_ROLE", "server")
        AT_EXIT.append(lambda: Path(f"{args.stats_out}.{role}.json").write_text(json.dumps(server.stats())))
    times = os.times()
    log(f"start-up cpu {times.user + times.system:.3f}s")  # for the scale benchmark: what a server costs to start
    log(f"serving {args.model} on {args.host}:{args.port} since {time.time():.3f}")
    if args.crash_after_s is not None:
        exit_later(args.crash_after_s, args.exit_code, "crash fault")
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
