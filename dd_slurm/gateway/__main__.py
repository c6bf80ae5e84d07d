"""`python -m dd_slurm.gateway [--await-config] CONFIG.json` (or the bundle's `entry.py _gateway ...`).

`--await-config`: the runtime starts the gateway while the servers load, and writes CONFIG
(atomically) once every replica is ready and proven ours. Until CONFIG exists the gateway has
imported what it needs and waits, listening nowhere; SIGTERM or SIGINT while it waits ends it with
exit 0. Without the flag a missing CONFIG is an error, as any unreadable one.

Stop signals from the boot's first instruction on (stops.py): one that lands while it waits ends it
as above; one that lands after its config exists, before it serves, ends it with exit 0 too
("stopped before serving"), before it listens.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from dd_slurm.clock import Clock
from dd_slurm.gateway.stops import record_stop_signals, stop_requested

AWAIT_FLAG = "--await-config"
AWAIT_POLL_S = 0.005  # one stat() per poll: what the client's start waits for once CONFIG is written


def await_config(path: Path, clock: Clock, received: list[int], waiting: Callable[[], None]) -> bool:
    """True once `path` exists; False when a stop signal is (or was already) in `received` first.
    `waiting` runs once `record_stop_signals(received)` is in place, so whoever it tells may signal."""
    waiting()
    while not path.exists():
        if stop_requested(received):
            return False
        clock.sleep(AWAIT_POLL_S)
    return True


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
