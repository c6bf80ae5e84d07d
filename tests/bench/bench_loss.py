"""`make bench` row: the gateway's throughput right after one of four replicas is lost, as a share
of what a gateway over the three that are left serves (goal >= 0.9).

Four fake model servers as in bench_gateway; two gateways side by side: one over the three
survivors (the baseline), one over all four. The fourth server is SIGKILLed and the routes file
marks it lost, as the supervisor does on seeing its step exit; the load starts at once, with no
warm-up, and runs for the 10 s after the loss (the quick mode: its short run). Runs alternate
baseline and loss, each loss on a fresh gateway and server set, so both see the same machine."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.bench.bench_gateway import CAPACITY, LATENCY_S, PATH, ROOT, Processes, free_port, load, wait_listening
from tests.bench.sizes import Sizes

AFTER_LOSS_S = 10.0
RUNS = 3


def start_gateway(procs: Processes, tmp: Path, name: str, ports: list[int],
                  metrics: bool = False) -> tuple[int, int, Path]:
    """(port, pid, routes file) of a gateway over `ports` that follows a routes file; `metrics`:
    it reads the replicas' own /metrics, as an attempt's gateway does."""
    routes = tmp / f"{name}-routes.json"
    config = {"schema": 1, "listen": {"host": "127.0.0.1", "port": 0},
              "aliases": {"m": {"replicas": [{"deployment": "bench", "replica": i, "expendable": True,
                                              "base_url": f"http://127.0.0.1:{p}/v1"} for i, p in enumerate(ports)]}},
              "state_path": str(tmp / f"{name}-state.json"), "stats_path": str(tmp / f"{name}-stats.json"),
              "stall_timeout_s": 60, "routes_path": str(routes), "replica_metrics": metrics}
    (tmp / f"{name}.json").write_text(json.dumps(config))
    proc = procs.start([sys.executable, "-m", "dd_slurm.gateway", str(tmp / f"{name}.json")],
                       {**os.environ, "PYTHONPATH": str(ROOT)})
    state = tmp / f"{name}-state.json"
    while not state.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited {proc.poll()}")
        time.sleep(0.05)
    return json.loads(state.read_text())["port"], proc.pid, routes


def backends(procs: Processes, count: int) -> tuple[list[int], list[int]]:
    model = str(ROOT / "dd_slurm" / "testing" / "fake_model.py")
    ports = [free_port() for _ in range(count)]
    pids = [procs.start([sys.executable, model, "--host", "127.0.0.1", "--port", str(port), "--model", "m",
                         "--capacity", str(CAPACITY), "--latency-s", str(LATENCY_S)]).pid for port in ports]
    for port in ports:
        wait_listening(port)
    return ports, pids


def one_round(tmp: Path, connections: int, seconds: float, index: int) -> tuple[float, float]:
    """(rps over the 3 survivors, rps in the `seconds` after losing the 4th of 4)."""
    procs = Processes()
    try:
        ports, pids = backends(procs, 4)
        three, three_pid, _ = start_gateway(procs, tmp, f"three-{index}", ports[:3])
        four, four_pid, routes = start_gateway(procs, tmp, f"four-{index}", ports)
        base = load([(three, "/m" + PATH)], connections, {"gateway": [three_pid]}, seconds, 0.5)
        os.kill(pids[3], signal.SIGKILL)
        routes.write_text(json.dumps({"schema": 1, "replicas": {"bench/3": {
            "state": "lost", "base_url": f"http://127.0.0.1:{ports[3]}/v1", "readmit": 0}}}))
        after = load([(four, "/m" + PATH)], connections, {"gateway": [four_pid]}, seconds, 0.0)
        return base["rps"], after["rps"]
    finally:
        procs.stop_all()


def loss_benchmarks(row: Callable[..., dict], sizes: Sizes) -> list[dict]:
    connections = sizes.gateway_concurrency[0]
    seconds = sizes.gateway_seconds if sizes.quick else AFTER_LOSS_S
    with tempfile.TemporaryDirectory() as name:
        rounds = [one_round(Path(name), connections, seconds, i) for i in range(1 if sizes.quick else RUNS)]
    shares = [after / base for base, after in rounds if base]
    note = "; ".join(f"{after:.0f} of {base:.0f} req/s" for base, after in rounds)
    return [row(f"gateway throughput in the {seconds:g} s after losing 1 of 4 replicas, share of 3 replicas, "
                f"{connections} concurrent", shares, "x", ">= 0.9", note)]
