"""The fake model server's multi-node side (standard library only): a leader gathers its
followers on the coordination port and exits when one goes away; a follower joins its leader and
exits when the leader goes away. Also the log line and the delayed exit both sides use."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time

RANK_FAILURE_EXIT = 17


def log(message: str) -> None:
    print(f"fake_model[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def exit_later(seconds: float, code: int, why: str) -> None:
    def fire() -> None:
        log(f"{why}: exiting {code}")
        os._exit(code)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def gather_followers(args: argparse.Namespace) -> list[socket.socket]:
    """Leader: accept num_nodes-1 JOINs on the coordination port; watch them afterwards."""
    listener = socket.create_server((args.host, args.coord_port), reuse_port=False)
    listener.settimeout(args.join_timeout)
    joined: list[socket.socket] = []
    while len(joined) < args.num_nodes - 1:
        try:
            conn, peer = listener.accept()
        except TimeoutError:
            log(f"only {len(joined)} of {args.num_nodes - 1} followers joined")
            sys.exit(RANK_FAILURE_EXIT)
        hello = conn.recv(64).decode(errors="replace").strip()
        log(f"follower joined from {peer[0]}: {hello}")
        joined.append(conn)
    listener.close()
    for conn in joined:
        threading.Thread(target=watch_peer, args=(conn, "follower"), daemon=True).start()
    return joined


def watch_peer(conn: socket.socket, who: str) -> None:
    conn.settimeout(None)
    try:
        while conn.recv(64):
            pass
    except OSError:
        pass
    log(f"{who} went away")
    os._exit(RANK_FAILURE_EXIT)


def run_follower(args: argparse.Namespace) -> None:
    deadline = time.monotonic() + args.join_timeout
    while True:
        try:
            conn = socket.create_connection((args.leader, args.coord_port), timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                log("could not reach the leader")
                sys.exit(RANK_FAILURE_EXIT)
            time.sleep(0.2)
    conn.sendall(f"JOIN rank={args.node_rank}\n".encode())
    log(f"joined leader {args.leader}:{args.coord_port} as rank {args.node_rank}")
    if args.die_after_s is not None:
        exit_later(args.die_after_s, args.exit_code, "follower fault")
    watch_peer(conn, "leader")
