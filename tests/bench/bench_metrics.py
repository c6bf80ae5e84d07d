"""`make bench` rows for watching a run: what the metrics cost the gateway, and `status --json` of
an attempt whose client is running (with its progress).

- Gateway throughput with metrics on, as a share of without (goal >= 0.95): two gateways over
  the same four fake servers, side by side in alternating runs; one reads the servers' /metrics
  (every 5 s, as an attempt's does) and is scraped at its own /metrics once a second during the
  load, the other does neither (what the gateway was before the metrics).
- `status --json` of a running attempt on the lab cluster (goal < 150 ms): a client writing records
  until signalled, so the status reads the gateway's stats and the result file for `progress`."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.bench.bench_gateway import PATH, Processes, load
from tests.bench.bench_loss import backends, start_gateway
from tests.bench.sizes import Sizes

RUNS = 3
SECONDS = 5.0


def scraping(port: int, stop: threading.Event) -> None:
    """Prometheus at its most eager: GET /metrics once a second until `stop`."""
    while not stop.wait(1.0):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        except OSError:
            pass


def metrics_cost(row: Callable[..., dict], sizes: Sizes) -> list[dict]:
    connections = sizes.gateway_concurrency[0]
    seconds = sizes.gateway_seconds if sizes.quick else SECONDS
    procs = Processes()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        try:
            ports, pids = backends(procs, 4)
            plain, plain_pid, _ = start_gateway(procs, tmp, "plain", ports, metrics=False)
            watched, watched_pid, _ = start_gateway(procs, tmp, "watched", ports, metrics=True)
            pairs = []
            for _ in range(1 if sizes.quick else RUNS):
                base = load([(plain, "/m" + PATH)], connections, {"gateway": [plain_pid]}, seconds, 0.5)
                stop = threading.Event()
                scraper = threading.Thread(target=scraping, args=(watched, stop), daemon=True)
                scraper.start()
                try:
                    with_metrics = load([(watched, "/m" + PATH)], connections, {"gateway": [watched_pid]}, seconds, 0.5)
                finally:
                    stop.set()
                    scraper.join()
                pairs.append((base["rps"], with_metrics["rps"]))
        finally:
            procs.stop_all()
    note = "; ".join(f"{w:.0f} against {b:.0f} req/s" for b, w in pairs)
    return [row(f"gateway throughput with metrics on (replicas' /metrics read, its own scraped each second), "
                f"share of without, {connections} concurrent", [w / b for b, w in pairs if b], "x", ">= 0.95", note)]


def running_status(row: Callable[..., dict], sizes: Sizes, fresh_process: Callable, cluster_down: Callable) -> list[dict]:
    """`status --json` of an attempt whose client is running, on the lab cluster."""
    if down := cluster_down(sizes):
        return [row("status --json of a running attempt", [], "", "", down)]
    from tests.bench.bench import use_host_cluster
    from tests.runtime.harness import plan_data
    from tests.slurm.real_attempt import submit, wait_job_gone, wait_state

    use_host_cluster()
    exe = str(Path(sys.executable).parent / "dd-slurm")
    with tempfile.TemporaryDirectory() as tmp:
        data = plan_data("single-node")
        data["client"]["argv"] += ["--until-signalled"]
        data["client"].update(timeout_s=None, stop_grace_s=5)
        attempt, job = submit(Path(tmp), data, "bench-running-status")
        try:
            wait_state(attempt, ("client",), 120)
            deadline = time.monotonic() + 30
            while not (attempt / "gateway-stats.json").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            runs = [fresh_process([exe, "status", "--json", str(attempt)]) for _ in range(sizes.runs)]
            answer = json.loads(subprocess.run([exe, "status", "--json", str(attempt)], capture_output=True,
                                               text=True).stdout)
        finally:
            subprocess.run(["scancel", job], capture_output=True)
        wait_state(attempt, ("done",), 120)
        wait_job_gone(job)
    has = "with progress" if answer.get("progress") else "NO progress in the answer"
    return [row("status --json of a running attempt (client writing), lab cluster", [t * 1000 for t, _ in runs], "ms",
                "< 150 ms", f"{has}; one squeue; the gateway's stats and the result file read")]
