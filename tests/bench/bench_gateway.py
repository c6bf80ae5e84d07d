"""`make bench` rows for the gateway, measured side by side in one run on the same fake backends.

Four fake model servers (capacity CAPACITY requests at once, the rest queued as vLLM does, 50 ms
each) on loopback. At 64 and 256 concurrent keep-alive connections (the load generator is its own
asyncio process), each run long enough to count MIN_REQUESTS (3 s, or ~11 s for one replica):
direct to one replica, direct to four (connections spread by the client: the no-proxy baseline for
four), through the gateway to one and to four, and through nginx `least_conn` to four (Debian's
nginx, installed here if missing, run with its own config on loopback and stopped afterwards).
"Added" latency is measured against the direct run with the same replicas in the same round (the
median of those paired differences), so the servers' own queueing cancels out.

Every process shares the machine's cores, so each row's note also says where the CPU went in the
measured window: microseconds of CPU per request of the load generator, the fake backends
(together), and the gateway or nginx (master and worker), and how busy the whole machine was
(anything else running on it included). A throughput goal missed on a saturated machine shows here
as busy ~100 % with the shares that filled it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.sizes import FULL, Sizes  # noqa: E402  (ROOT on the path first)

CAPACITY = int(os.environ.get("DD_SLURM_BENCH_CAPACITY", "8"))
LATENCY_S = 0.05
SECONDS, WARMUP = 3.0, 1.0
# Each run counts at least this many requests: with one replica (~157 req/s) 3 s hold ~470, and at
# 256 concurrent a p50 of ~1.6 s is N/throughput, so one request more or less moves it ~3.4 ms,
# more than the 2 ms goal it is held to. One replica's runs are longer instead.
MIN_REQUESTS = 1800
# Each setup this many times, interleaved, so that noise from other load spreads evenly. At one
# replica and 256 concurrent the server's queue order alone moves a run's p50 by a few ms (the mean
# is held by Little's law), so the note gives every round's difference and the added mean too.
RUNS = 5
CONCURRENCY = (64, 256)
PATH = "/v1/chat/completions"
NGINX_CONF = """worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy; fastcgi_temp_path {tmp}/fcgi;
  uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
  upstream m {{ least_conn; {servers} keepalive 1024; }}
  server {{
    listen 127.0.0.1:{port};
    location /m/ {{ proxy_pass http://m/; proxy_http_version 1.1; proxy_set_header Connection "";
                   proxy_buffering off; }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def nginx_binary(install: bool = True) -> str | None:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if found or os.geteuid() != 0 or not install:
        return found
    print("bench: installing Debian's nginx-light for the comparison", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "install", "-y", "-qq", "nginx-light"], capture_output=True, env=env, timeout=600)
    if Path("/run/nginx.pid").exists():  # the package starts the system's nginx: leave no daemon behind
        subprocess.run(["/usr/sbin/nginx", "-s", "quit"], capture_output=True, timeout=60)
    return shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


class Processes:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)


def with_children(pid: int) -> list[int]:
    """The process and its direct children (nginx: master and worker)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return [pid, *(int(c) for c in children)]


def start_gateway(procs: Processes, tmp: Path, name: str, ports: list[int]) -> tuple[int, int]:
    """(port, pid) of a gateway over `ports`."""
    config = {"schema": 1, "listen": {"host": "127.0.0.1", "port": 0},
              "aliases": {"m": {"replicas": [{"deployment": "bench", "replica": i,
                                              "base_url": f"http://127.0.0.1:{p}/v1"} for i, p in enumerate(ports)]}},
              "state_path": str(tmp / f"{name}-state.json"), "stats_path": str(tmp / f"{name}-stats.json"),
              "stall_timeout_s": 60}
    (tmp / f"{name}.json").write_text(json.dumps(config))
    proc = procs.start([sys.executable, "-m", "dd_slurm.gateway", str(tmp / f"{name}.json")],
                       {**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 15
    while not (tmp / f"{name}-state.json").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the gateway never published its port (exit code {proc.poll()})")
        time.sleep(0.05)
    return json.loads((tmp / f"{name}-state.json").read_text())["port"], proc.pid


def start_nginx(procs: Processes, tmp: Path, ports: list[int], install: bool = True) -> tuple[int, int] | None:
    """(port, master pid) of nginx least_conn over `ports`, None without nginx (installed first
    unless `install` is false)."""
    binary = nginx_binary(install)
    if not binary:
        return None
    port = free_port()
    home = tmp / "nginx"
    home.mkdir()
    home.chmod(0o755)
    servers = " ".join(f"server 127.0.0.1:{p};" for p in ports)
    (home / "nginx.conf").write_text(NGINX_CONF.format(tmp=home, servers=servers, port=port))
    proc = procs.start([binary, "-p", str(home), "-c", str(home / "nginx.conf")])
    wait_listening(port)
    return port, proc.pid


def load(port_paths: list[tuple[int, str]], connections: int, cpu: dict[str, list[int]],
         seconds: float = SECONDS, warmup: float = WARMUP) -> dict:
    """One loadgen run; `cpu`: group name -> pids whose CPU time per request it reports."""
    targets = [f"127.0.0.1:{port}{path}" for port, path in port_paths]
    groups = [f"--cpu={name}={','.join(str(p) for p in pids)}" for name, pids in cpu.items()]
    done = subprocess.run([sys.executable, "-m", "tests.bench.loadgen", "--connections", str(connections),
                           "--seconds", str(seconds), "--warmup", str(warmup), *groups, *targets],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    return json.loads(done.stdout)


def gateway_benchmarks(row: Callable[..., dict], sizes: Sizes = FULL) -> list[dict]:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        procs = Processes()
        try:
            return _measure(row, procs, tmp, sizes)
        finally:
            procs.stop_all()


def _measure(row: Callable[..., dict], procs: Processes, tmp: Path, sizes: Sizes) -> list[dict]:
    model = str(ROOT / "dd_slurm" / "testing" / "fake_model.py")
    ports = [free_port() for _ in range(4)]
    backends = [procs.start([sys.executable, model, "--host", "127.0.0.1", "--port", str(port), "--model", "m",
                             "--capacity", str(CAPACITY), "--latency-s", str(LATENCY_S)]).pid for port in ports]
    for port in ports:
        wait_listening(port)
    (gw1, gw1_pid), (gw4, gw4_pid) = start_gateway(procs, tmp, "gw1", ports[:1]), start_gateway(procs, tmp, "gw4", ports)
    setups = {"direct, 1 replica": ([(ports[0], PATH)], {"backends": backends[:1]}),
              "direct, 4 replicas (client spreads)": ([(p, PATH) for p in ports], {"backends": backends}),
              "gateway, 1 replica": ([(gw1, "/m" + PATH)], {"backends": backends[:1], "gateway": [gw1_pid]}),
              "gateway, 4 replicas": ([(gw4, "/m" + PATH)], {"backends": backends, "gateway": [gw4_pid]})}
    nginx = start_nginx(procs, tmp, ports, install=not sizes.quick)
    if nginx:
        setups["nginx least_conn, 4 replicas"] = ([(nginx[0], "/m" + PATH)],
                                                  {"backends": backends, "nginx": with_children(nginx[1])})
    rows = []
    for connections in sizes.gateway_concurrency:
        found: dict[str, list[dict]] = {label: [] for label in setups}
        for _ in range(sizes.gateway_runs):
            for label, (targets, cpu) in setups.items():
                seconds = sizes.gateway_seconds if sizes.quick else seconds_for(cpu["backends"])
                found[label].append(load(targets, connections, cpu, seconds, 0.1 if sizes.quick else WARMUP))
        rows += _rows(row, connections, found)
    return rows


def seconds_for(backends: list[int]) -> float:
    """A run long enough to count MIN_REQUESTS at the backends' capacity (CAPACITY / LATENCY_S each)."""
    return max(SECONDS, MIN_REQUESTS / (len(backends) * CAPACITY / LATENCY_S))


def median_of(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def cpu_note(results: list[dict]) -> str:
    """Median CPU microseconds per request of each process group (of which in the kernel), the share
    of the machine's cores they used together, and the machine's busy share (anything else running
    on it included)."""
    names = results[0]["cpu_us_per_request"]
    median = lambda key, name: statistics.median(r[key][name] for r in results)
    shares = ", ".join(f"{name} {median('cpu_us_per_request', name):.0f} ({median('sys_us_per_request', name):.0f} sys)"
                       for name in names)
    busy = statistics.median(r["machine_busy"] for r in results)
    cores = results[0]["cores"]
    ours = statistics.median(sum(r["cpu_us_per_request"].values()) * r["rps"] / 1e6 / cores for r in results)
    return f"CPU µs/req: {shares}; these processes {ours:.0%} of the {cores} cores, the machine busy {busy:.0%}"


def by_round(results: list[dict], direct: list[dict], key: str) -> list[float]:
    """Each run's difference from the direct run of the same round (the rounds are interleaved, so
    drift in the machine's load cancels within a pair)."""
    return [r[key] - d[key] for r, d in zip(results, direct)]


def added_note(results: list[dict], direct: list[dict]) -> str:
    """The added p50 (the median over rounds, and each round's), p99 and mean against the direct runs."""
    p50, p99, mean = (by_round(results, direct, key) for key in ("p50_ms", "p99_ms", "mean_ms"))
    rounds = " ".join(f"{d:+.1f}" for d in p50)
    return (f"added p50 {statistics.median(p50):+.1f} ms (rounds {rounds}), p99 {statistics.median(p99):+.1f} ms, "
            f"mean {statistics.median(mean):+.1f} ms; ")


def _rows(row: Callable[..., dict], connections: int, found: dict[str, list[dict]]) -> list[dict]:
    """One row per setup: req/s over the runs; the note gives median p50/p99 and the added latency
    against the direct runs with as many replicas (paired run by run)."""
    med = {label: {k: median_of(results, k) for k in ("rps", "p50_ms", "p99_ms")} for label, results in found.items()}
    one = med["direct, 1 replica"]
    nginx = med.get("nginx least_conn, 4 replicas")
    rows = []
    for label, results in found.items():
        got = med[label]
        direct = found["direct, 1 replica" if "1 replica" in label else "direct, 4 replicas (client spreads)"]
        added = "" if label.startswith("direct") else added_note(results, direct)
        errors = sum(r["errors"] for r in results)
        note = f"{added}p50 {got['p50_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms, non-200: {errors}; {cpu_note(results)}"
        goal = "added p50 <= 2 ms" if label.startswith("gateway") else ""
        if label == "gateway, 4 replicas":
            goal += f"; >= 3.6x one replica: x{got['rps'] / one['rps']:.2f}"
            if nginx:
                goal += f"; >= 0.9x nginx: x{got['rps'] / nginx['rps']:.2f}"
        rows.append(row(f"{label}, {connections} concurrent", [r["rps"] for r in results], "req/s", goal, note))
    if not nginx:
        rows.append(row(f"nginx least_conn, {connections} concurrent", [], "req/s", "",
                        "skipped: nginx unavailable (the quick mode installs nothing)"))
    return rows


if __name__ == "__main__":  # the gateway rows alone: python -m tests.bench.bench_gateway
    from tests.bench.bench import row, table

    print(table(gateway_benchmarks(row)))
