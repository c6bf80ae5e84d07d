"""A minimal model server for runtime fault tests (standard library only): /health answers 200
after --load-time, and on request it misbehaves in ways a real server might:

--escape-pidfile PATH   double-fork a daemon that leaves the step: new session, cleared environment
                        (`setsid env -i sleep 1000`), and write its pid to PATH;
--signal-on-health DIR  on the first 200 from /health, SIGTERM the attempt's supervisor (its pid
                        from DIR/supervisor.json): a signal that lands during the last readiness probe.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

SUPERVISOR_RECORD = "supervisor.json"  # run as a script, outside the package: store/attempt_files' SUPERVISOR


def escape(pidfile: str) -> None:
    """The classic double fork: the daemon's parent exits at once, so it is orphaned."""
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    os.setsid()
    daemon = os.fork()
    if daemon:
        Path(pidfile).write_text(str(daemon))
        os._exit(0)
    os.execve("/usr/bin/env", ["env", "-i", "sleep", "1000"], {})


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--load-time", type=float, default=0.0)
    p.add_argument("--escape-pidfile")
    p.add_argument("--signal-on-health")
    args = p.parse_args(argv)
    if args.escape_pidfile:
        escape(args.escape_pidfile)
    ready_at = time.monotonic() + args.load_time
    signalled: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ready = time.monotonic() >= ready_at
            if ready and args.signal_on_health and not signalled:
                pid = json.loads(Path(args.signal_on_health, SUPERVISOR_RECORD).read_text())["pid"]
                os.kill(pid, signal.SIGTERM)
                signalled.append(pid)
                time.sleep(0.2)  # the supervisor has the signal before it reads this answer
            body = b'{"status": "ok"}' if ready else b'{"status": "loading"}'
            self.send_response(200 if ready and self.path.startswith("/health") else 503)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            return

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"fault_server[{os.getpid()}]: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
