"""The replicas' own counters, read from each replica's `/metrics` (vLLM's names, or SGLang's):
prompt and generation tokens, requests running and waiting. The gateway aggregates them into its
own exposition and stats, and a generation counter that moves is progress for the stall watch
(Data Designer's requests are not streamed: a long generation sends no byte until it ends).

What a replica answers is hostile bytes like any other: one bounded read (MAX_BYTES, TIMEOUT_S),
a 200 status line, and only the lines of the names below are parsed, strictly; a replica that
answers 404 exposes nothing and is not asked again. Standard library only (runs from the bundle)."""

from __future__ import annotations

import asyncio
import math
import re
from typing import Optional

NAMES = {  # ours: the servers' names for it (vLLM, SGLang)
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
}
OURS = {name: ours for ours, names in NAMES.items() for name in names}
MAX_BYTES = 1 << 20
TIMEOUT_S = 2.0
STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(\s+-?\d+)?")


class NotExposed(Exception):
    """The replica has no /metrics (404): it is not asked again."""


def parse(text: str) -> dict[str, float]:
    """Our names' values, each summed over its label sets; ValueError naming the first bad line
    among those of our names (other lines are not looked at)."""
    found: dict[str, float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(None, 1)[0]
        if name not in OURS:
            continue
        match = SAMPLE.fullmatch(line.strip())
        value = _number(match.group(3)) if match else None
        if value is None:
            raise ValueError(f"line {number}: not a sample of {name}")
        found[OURS[name]] = found.get(OURS[name], 0.0) + value
    return found


def _number(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


async def read_metrics(host: str, port: int, timeout: float = TIMEOUT_S) -> dict[str, float]:
    """One GET /metrics (HTTP/1.0, the connection closed by the replica); NotExposed on 404,
    ValueError for anything else that is not a 200 with parsable samples, OSError/TimeoutError
    when it cannot be read in `timeout`."""
    return await asyncio.wait_for(_read(host, port), timeout)


async def _read(host: str, port: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection(host, port, limit=MAX_BYTES)
    try:
        writer.write(b"GET /metrics HTTP/1.0\r\nHost: %s:%d\r\nAccept: text/plain\r\n\r\n" % (host.encode(), port))
        data = await reader.read(MAX_BYTES + 1)
        while data and len(data) <= MAX_BYTES:
            more = await reader.read(MAX_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    finally:
        writer.close()
    if len(data) > MAX_BYTES:
        raise ValueError(f"/metrics is larger than {MAX_BYTES} bytes")
    head, _, body = data.partition(b"\r\n\r\n")
    status = STATUS.match(head)
    if not status:
        raise ValueError("not an HTTP/1.x response")
    if status.group(1) == b"404":
        raise NotExposed()
    if status.group(1) != b"200":
        raise ValueError(f"/metrics answered {status.group(1).decode()}")
    return parse(body.decode("utf-8", "replace"))
