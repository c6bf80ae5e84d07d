"""The gateway's stop signals before its event loop handles them: recorded only, then heeded.

Run from the bundle, the boot's first instruction records SIGTERM and SIGINT into a list that the
gateway keeps appending to (`record_stop_signals`) until its loop's own handlers are in place; a
stop found there, however early it landed, ends the gateway as one received later would.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def record_stop_signals(received: list[int]) -> None:
    """From now on SIGTERM and SIGINT are only appended to `received` (the handlers only record)."""
    for signo in STOP_SIGNALS:
        signal.signal(signo, lambda got, _frame: received.append(got))


def stop_requested(received: Sequence[int]) -> bool:
    return any(signo in STOP_SIGNALS for signo in received)
