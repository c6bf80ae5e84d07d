"""Which replica serves the next request: least outstanding requests, ties round-robin (pure)."""

from __future__ import annotations

from collections.abc import Sequence


def pick(loads: Sequence[int], caps: Sequence[int], usable: Sequence[bool], cursor: int) -> int | None:
    """Among usable replicas below their in-flight cap, the index of the least loaded one; of equally
    loaded ones, the first at or after `cursor` (so a caller that moves the cursor past its choice
    goes round the ties in turn). None when no replica qualifies."""
    count = len(loads)
    best = None
    best_load = 0
    for step in range(count):
        index = (cursor + step) % count
        load = loads[index]
        if usable[index] and load < caps[index] and (best is None or load < best_load):
            best, best_load = index, load
    return best
