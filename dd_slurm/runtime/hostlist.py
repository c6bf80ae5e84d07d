"""Slurm hostlist expressions (`n[1-3,5]`, `gpu-[01-02],login1`) expanded in Python (pure).

Like Slurm: a range whose end is below its start (`n[3-1]`) is an error, brackets must balance and
not nest, numbers are ASCII digits, and one expression expands to at most 64K names. Errors are
HostlistError (a ValueError) naming the expression."""

from __future__ import annotations

import re
from math import prod

MAX_HOSTS = 64 * 1024
_NUMBER = re.compile(r"[0-9]{1,18}\Z", re.ASCII)


class HostlistError(ValueError):
    pass


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise HostlistError(f"bad hostlist {text[:80]!r}: unbalanced or nested brackets")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise HostlistError(f"bad hostlist {text[:80]!r}: unclosed bracket")
    parts.append("".join(current))
    return [p for p in parts if p]


def _range(body: str, item: str) -> list[tuple[int, int, int]]:
    """(low, high, width) of each part of a bracket body."""
    spans = []
    for part in body.split(","):
        low, dash, high = part.partition("-")
        if not _NUMBER.match(low) or (dash and not _NUMBER.match(high)):
            raise HostlistError(f"bad hostlist range [{body[:60]}] in {item[:80]!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise HostlistError(f"bad hostlist range [{body[:60]}] in {item[:80]!r}: {last} is below {first}")
        spans.append((first, last, len(low)))
    return spans


def _segments(item: str) -> list[list[str] | list[tuple[int, int, int]]]:
    """Literal text and bracket ranges of one item, in order: `r[1-2]n[1-2]` -> r, 1-2, n, 1-2."""
    out: list = []
    for literal, body in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
        if literal:
            out.append([literal])
        if body:
            out.append(_range(body, item))
    if "[]" in item:
        raise HostlistError(f"bad hostlist {item[:80]!r}: empty brackets")
    return out


def _count(segment) -> int:
    if isinstance(segment[0], str):
        return 1
    return sum(last - first + 1 for first, last, _w in segment)


def _values(segment) -> list[str]:
    if isinstance(segment[0], str):
        return segment
    return [str(n).zfill(width) for first, last, width in segment for n in range(first, last + 1)]


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        segments = _segments(item)
        if len(hosts) + prod(_count(s) for s in segments) > limit:
            raise HostlistError(f"hostlist {text[:80]!r} names more than {limit} hosts")
        names = [""]
        for segment in segments:
            names = [name + value for name in names for value in _values(segment)]
        hosts += names
    return hosts
