"""`python -m dd_slurm.gateway [--await-config] CONFIG.json` (or the bundle's `entry.py _gateway ...`).

`--await-config`: the runtime starts the gateway while the servers load, and writes CONFIG
(atomically) once every replica is ready and proven ours. Until CONFIG exists the gateway has
imported what it needs and waits, listening nowhere; SIGTERM or SIGINT while it waits ends it with
exit 0. Without the flag a missing CONFIG is an error, as any unreadable one.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

from dd_slurm.clock import Clock

AWAIT_FLAG = "--await-config"
AWAIT_POLL_S = 0.005  # one stat() per poll: what the client's start waits for once CONFIG is written


def await_config(path: Path, clock: Clock, waiting: Callable[[], None]) -> bool:
    """True once `path` exists; False when SIGTERM or SIGINT arrived first (their handlers only
    record). `waiting` runs once the handlers are in place, so whoever it tells may signal."""
    stopped: list[int] = []
    previous = {signo: signal.signal(signo, lambda got, _frame: stopped.append(got))
                for signo in (signal.SIGTERM, signal.SIGINT)}
    try:
        waiting()
        while not stopped and not path.exists():
            clock.sleep(AWAIT_POLL_S)
    finally:
        for signo, handler in previous.items():
            signal.signal(signo, handler)
    return not stopped


def main(argv: list[str]) -> int:
    from dd_slurm.gateway.config import ConfigError, load
    from dd_slurm.gateway.service import EXIT_CONFIG, log, serve

    waits = argv[:1] == [AWAIT_FLAG]
    args = argv[1:] if waits else argv
    if len(args) != 1:
        print(f"error: usage: python -m dd_slurm.gateway [{AWAIT_FLAG}] CONFIG.json", file=sys.stderr)
        return EXIT_CONFIG
    if waits and not await_config(Path(args[0]), Clock(), lambda: log(f"waiting for {args[0]}")):
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
    return serve(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
