"""The one clock: wall time for records, monotonic time for deadlines. Faked in tests."""

from __future__ import annotations

import time
from datetime import datetime, timezone


class Clock:
    """Real time. Every component takes a clock instead of calling `time` itself."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock(Clock):
    """A clock that moves only when told to (or when something sleeps on it)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall = start
        self._mono = 1000.0

    def wall(self) -> float:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        self._wall += seconds
        self._mono += seconds


def iso(ts: float) -> str:
    """UTC ISO-8601 with milliseconds, for records read by people."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds")


def slurm_time(ts: float) -> str:
    """Local time as Slurm's time options take it (`--starttime=2026-12-01T08:17:28`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))
