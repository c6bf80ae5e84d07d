"""`python -m dd_slurm.gateway [--await-config] CONFIG.json` (or the bundle's `entry.py _gateway ...`).

`--await-config`: the runtime starts the gateway while the servers load, and writes CONFIG
(atomically) once every replica is ready and proven ours. Until CONFIG exists the gateway has
imported what it needs and waits, listening nowhere; SIGTERM or SIGINT while it waits ends it with
exit 0. Without the flag a missing CONFIG is an error, as any unreadable one.

Signals from the first instruction: run from the bundle, the boot's handlers record every
SIGTERM/SIGINT into `early_signals` from the interpreter's first instruction on. `main` keeps
recording into that same list until the service's own loop handlers are in place, and a stop
signal found there, however early it landed, ends the gateway as one received later would.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

from dd_slurm.clock import Clock

AWAIT_FLAG = "--await-config"
AWAIT_POLL_S = 0.005  # one stat() per poll: what the client's start waits for once CONFIG is written


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def record_stop_signals(received: list[int]) -> None:
    """From now on SIGTERM and SIGINT are only appended to `received` (the handlers only record)."""
    for signo in STOP_SIGNALS:
        signal.signal(signo, lambda got, _frame: received.append(got))


def stop_requested(received: list[int]) -> bool:
    return any(signo in STOP_SIGNALS for signo in received)


def await_config(path: Path, clock: Clock, received: list[int], waiting: Callable[[], None]) -> bool:
    """True once `path` exists; False when a stop signal is (or was already) in `received`.
    `waiting` runs once `record_stop_signals(received)` is in place, so whoever it tells may signal."""
    waiting()
    while not stop_requested(received) and not path.exists():
        clock.sleep(AWAIT_POLL_S)
    return not stop_requested(received)


def main(argv: list[str], early_signals: list[int] | None = None) -> int:
    """`early_signals`: what the bundle's boot has recorded so far (None when run as `-m`)."""
    received = early_signals if early_signals is not None else []
    record_stop_signals(received)
    from dd_slurm.gateway.config import ConfigError, load
    from dd_slurm.gateway.service import EXIT_CONFIG, log, serve

    waits = argv[:1] == [AWAIT_FLAG]
    args = argv[1:] if waits else argv
    if len(args) != 1:
        print(f"error: usage: python -m dd_slurm.gateway [{AWAIT_FLAG}] CONFIG.json", file=sys.stderr)
        return EXIT_CONFIG
    if waits and not await_config(Path(args[0]), Clock(), received, lambda: log(f"waiting for {args[0]}")):
        log("stopped before its config was written")
        return 0
    try:
        config = load(Path(args[0]).read_text())
    except OSError as err:
        print(f"error: {args[0]}: cannot read ({err.strerror})", file=sys.stderr)
        return EXIT_CONFIG
    except ConfigError as err:
        print(f"error: {args[0]}: {err}", file=sys.stderr)
        return EXIT_CONFIG
    return serve(config, received=received)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
