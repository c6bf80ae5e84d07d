"""A closed-loop HTTP/1.1 load generator (its own process): CONNECTIONS keep-alive connections
spread over TARGETS, each sending the next request when the last answer is complete, for
--seconds after --warmup seconds. Prints one JSON line: requests, errors, rps, p50/p99 ms, and
where the CPU went in the measured window: `cpu_us_per_request` for the load generator itself and
for each `--cpu NAME=PID[,PID...]` group (user + system time from /proc/PID/stat), and the machine's
busy share of all its cores (/proc/stat), so that a saturated machine is visible.

    python -m tests.bench.loadgen --connections 64 --seconds 3 --cpu gateway=1234 127.0.0.1:8000/m/v1/chat/completions
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Say something short."}],
                   "max_tokens": 16}).encode()


TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process (all its threads); zeros once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) * TICK_S, int(fields[12]) * TICK_S  # utime, stime (fields 14 and 15 of stat)


def group_cpu_s(pids: list[int]) -> tuple[float, float]:
    times = [process_cpu_s(pid) for pid in pids]
    return sum(t[0] for t in times), sum(t[1] for t in times)


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies over every core since boot."""
    with open("/proc/stat", "rb") as handle:
        values = [int(v) for v in handle.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def sample(groups: dict[str, list[int]]) -> dict:
    own = os.times()
    return {"self": (own.user, own.system), "machine": machine_busy(),
            **{name: group_cpu_s(pids) for name, pids in groups.items()}}


async def watch_cpu(groups: dict[str, list[int]], record_from: float, stop_at: float, out: dict) -> None:
    """CPU samples at the start and the end of the measured window."""
    await asyncio.sleep(max(0.0, record_from - time.perf_counter()))
    out["begin"] = sample(groups)
    await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
    out["end"] = sample(groups)


def cpu_report(samples: dict, requests: int) -> dict:
    """CPU microseconds per request (user + system, and system alone) of each group in the window,
    and the machine's busy share."""
    begin, end = samples["begin"], samples["end"]
    busy = end["machine"][0] - begin["machine"][0]
    total = end["machine"][1] - begin["machine"][1]
    per = lambda seconds: round(seconds * 1e6 / max(requests, 1), 1)
    names = [name for name in begin if name != "machine"]
    user = {name: end[name][0] - begin[name][0] for name in names}
    system = {name: end[name][1] - begin[name][1] for name in names}
    rename = lambda name: "loadgen" if name == "self" else name
    return {"cpu_us_per_request": {rename(n): per(user[n] + system[n]) for n in names},
            "sys_us_per_request": {rename(n): per(system[n]) for n in names},
            "machine_busy": round(busy / total, 3) if total else None, "cores": os.cpu_count()}


def request_bytes(host: str, port: int, path: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY


BUFFER = bytearray(1 << 16)
VIEW = memoryview(BUFFER)


class Connection(asyncio.BufferedProtocol):
    """One keep-alive connection in a closed loop: the next request goes out when the last answer
    is complete (Content-Length framed). An asyncio protocol, not streams, reading into one shared
    buffer (a plain protocol costs an mmap/mremap/munmap per read): the load generator shares the
    machine's cores with what it measures, so it spends as little CPU as it can."""

    def __init__(self, payload: bytes, stop_at: float, record_from: float, latencies: list[float],
                 errors: list[int], done: asyncio.Future) -> None:
        self.payload, self.stop_at, self.record_from = payload, stop_at, record_from
        self.latencies, self.errors, self.done = latencies, errors, done
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.need = -1  # body bytes still to come; -1: waiting for a head
        self.start = 0.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        self.send()

    def send(self) -> None:
        self.start = time.perf_counter()
        if self.start >= self.stop_at:
            self.transport.close()
        else:
            self.transport.write(self.payload)

    def get_buffer(self, sizehint: int) -> memoryview:
        return VIEW

    def buffer_updated(self, nbytes: int) -> None:
        data = bytes(VIEW[:nbytes])
        buf = self.buffer + data if self.buffer else data
        if self.need < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buf
                return
            head = buf[:end + 2]
            at = head.lower().find(b"\r\ncontent-length:")
            self.need = int(head[at + 17:head.find(b"\r\n", at + 2)]) if at >= 0 else 0
            if head[9:12] != b"200":
                self.errors.append(int(head[9:12]))
            buf = buf[end + 4:]
        if len(buf) < self.need:
            self.buffer = buf
            return
        self.buffer, self.need = b"", -1
        if self.start >= self.record_from:
            self.latencies.append(time.perf_counter() - self.start)
        self.send()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.start < self.stop_at:  # the server closed a connection it should have kept
            self.errors.append(0)
        if not self.done.done():
            self.done.set_result(None)


async def connection(target: tuple[str, int, str], stop_at: float, record_from: float, latencies: list[float],
                     errors: list[int]) -> None:
    host, port, path = target
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    await loop.create_connection(lambda: Connection(request_bytes(host, port, path), stop_at, record_from,
                                                    latencies, errors, done), host, port)
    await done


async def run(targets: list[tuple[str, int, str]], connections: int, seconds: float, warmup: float,
              groups: dict[str, list[int]] | None = None) -> dict:
    begin = time.perf_counter()
    record_from, stop_at = begin + warmup, begin + warmup + seconds
    latencies: list[float] = []
    errors: list[int] = []
    samples: dict = {}
    tasks = [connection(targets[i % len(targets)], stop_at, record_from, latencies, errors)
             for i in range(connections)]
    await asyncio.gather(watch_cpu(groups or {}, record_from, stop_at, samples), *tasks)
    latencies.sort()
    quantile = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else None
    return {"requests": len(latencies), "errors": len(errors), "rps": len(latencies) / seconds,
            "p50_ms": quantile(0.5), "p99_ms": quantile(0.99),
            "mean_ms": statistics.fmean(latencies) * 1000 if latencies else None,
            **cpu_report(samples, len(latencies))}


def parse_target(text: str) -> tuple[str, int, str]:
    hostport, _, path = text.partition("/")
    host, _, port = hostport.rpartition(":")
    return host, int(port), "/" + path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="loadgen")
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--cpu", action="append", default=[], metavar="NAME=PID[,PID...]",
                        help="report this group's CPU time per request")
    parser.add_argument("targets", nargs="+")
    args = parser.parse_args(argv)
    groups = {name: [int(p) for p in pids.split(",")] for name, _, pids in (g.partition("=") for g in args.cpu)}
    result = asyncio.run(run([parse_target(t) for t in args.targets], args.connections, args.seconds, args.warmup,
                             groups))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
