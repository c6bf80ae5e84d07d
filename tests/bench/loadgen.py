"""A closed-loop HTTP/1.1 load generator (its own process): CONNECTIONS keep-alive connections
spread over TARGETS, each sending the next request when the last answer is complete, for
--seconds after --warmup seconds. Prints one JSON line: requests, errors, rps, p50/p99 ms.

    python -m tests.bench.loadgen --connections 64 --seconds 3 127.0.0.1:8000/m/v1/chat/completions ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Say something short."}],
                   "max_tokens": 16}).encode()


def request_bytes(host: str, port: int, path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY


async def connection(target: tuple[str, int, str], stop_at: float, record_from: float, latencies: list[float],
                     errors: list[int]) -> None:
    host, port, path = target
    payload = request_bytes(host, port, path)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while True:
            start = time.perf_counter()
            if start >= stop_at:
                return
            writer.write(payload)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if head[9:12] != b"200":
                errors.append(int(head[9:12]))
            if start >= record_from:
                latencies.append(time.perf_counter() - start)
    finally:
        writer.close()


async def run(targets: list[tuple[str, int, str]], connections: int, seconds: float, warmup: float) -> dict:
    begin = time.perf_counter()
    record_from, stop_at = begin + warmup, begin + warmup + seconds
    latencies: list[float] = []
    errors: list[int] = []
    tasks = [connection(targets[i % len(targets)], stop_at, record_from, latencies, errors)
             for i in range(connections)]
    await asyncio.gather(*tasks)
    latencies.sort()
    quantile = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else None
    return {"requests": len(latencies), "errors": len(errors), "rps": len(latencies) / seconds,
            "p50_ms": quantile(0.5), "p99_ms": quantile(0.99),
            "mean_ms": statistics.fmean(latencies) * 1000 if latencies else None}


def parse_target(text: str) -> tuple[str, int, str]:
    hostport, _, path = text.partition("/")
    host, _, port = hostport.rpartition(":")
    return host, int(port), "/" + path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="loadgen")
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("targets", nargs="+")
    args = parser.parse_args(argv)
    result = asyncio.run(run([parse_target(t) for t in args.targets], args.connections, args.seconds, args.warmup))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
