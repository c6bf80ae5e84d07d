"""Slurm hostlist expressions (`n[1-3,5]`, `gpu-[01-02],login1`) expanded in Python (pure)."""

from __future__ import annotations

import re

_GROUP = re.compile(r"([^,\[]*)(\[[^\]]*\])?([^,\[]*)")


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p for p in parts if p]


def _expand_range(body: str) -> list[str]:
    out = []
    for part in body.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"bad hostlist range {body!r}")
        width = len(low)
        out += [str(n).zfill(width) for n in range(int(low), int(high or low) + 1)]
    return out


def expand_hostlist(text: str) -> list[str]:
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        if "[" not in item:
            hosts.append(item)
            continue
        prefix, _, rest = item.partition("[")
        body, _, suffix = rest.partition("]")
        for middle in _expand_range(body):
            hosts += [prefix + middle + tail for tail in (expand_hostlist(suffix) if "[" in suffix else [suffix])]
    return hosts
