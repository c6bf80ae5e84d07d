"""A running attempt's gateway scraped by a real Prometheus server (Debian's, unpacked from its
package by the fixture and started on loopback with a config the test writes), its exposition
accepted by `promtool check metrics`, and its counts held to the fake servers' own: tokens within
1 %, requests exactly."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.runtime.harness import outcome, plan_data, read
from tests.slurm.conftest import wait_until
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state

CACHE = Path(os.environ.get("DD_SLURM_LAB_DIR", "/var/lib/dd-slurm-lab")) / "prometheus"


def prometheus_tools() -> tuple[Path, Path]:
    """prometheus and promtool from Debian's package, unpacked once into the lab's state dir
    (no service is installed or started: only the two static binaries are used)."""
    binaries = (CACHE / "usr" / "bin" / "prometheus", CACHE / "usr" / "bin" / "promtool")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE.parent / ".prometheus.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(b.exists() for b in binaries):
            with tempfile.TemporaryDirectory() as tmp:
                got = subprocess.run(["apt-get", "download", "prometheus"], cwd=tmp, capture_output=True, text=True,
                                     timeout=600)
                if got.returncode != 0:
                    subprocess.run(["apt-get", "update"], capture_output=True, timeout=600, check=True)
                    subprocess.run(["apt-get", "download", "prometheus"], cwd=tmp, capture_output=True, timeout=600,
                                   check=True)
                deb = next(Path(tmp).glob("prometheus_*.deb"))
                subprocess.run(["dpkg-deb", "-x", str(deb), str(CACHE)], check=True, timeout=300)
    return binaries


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_key(attempt_dir: Path, name: str) -> str:
    """The attempt key as the client's process has it (its environment; this test runs as root on
    the client's node, as a site's scraper beside the client would be given it)."""
    pid = read(attempt_dir, "steps/client.started.json")["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(name.encode() + b"="))


def get(url: str, key: str | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def targets(port: int) -> dict[str, dict]:
    data = json.loads(get(f"http://127.0.0.1:{port}/api/v1/targets", None)[1])
    return {t["labels"]["job"]: t for t in data["data"]["activeTargets"]}


def scrape_config(tmp: Path, gateway: int, credentials: Path) -> Path:
    config = tmp / "prometheus.yml"
    config.write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: dd-slurm-gateway
    authorization:
      type: Bearer
      credentials_file: {credentials}
    static_configs:
      - targets: ["127.0.0.1:{gateway}"]
  - job_name: without-key
    static_configs:
      - targets: ["127.0.0.1:{gateway}"]
""")
    return config


@pytest.mark.timeout(300)
def test_prometheus_scrapes_the_gateway_and_its_counts_agree_with_the_servers(tmp_path, cluster) -> None:
    """A client writes records until signalled, over 3 replicas answering in 0.2 s. Prometheus,
    given the key in a credentials file, has the gateway's target `up`; without the key it is down
    with a 401; `promtool check metrics` accepts the exposition. At the end, each replica's token
    counts in the gateway's stats are within 1 % of the server's own, and its request count is
    exactly the server's request log."""
    prometheus, promtool = prometheus_tools()
    data = plan_data("replicas")
    data["deployments"][0]["argv"] += ["--latency-s", "0.2", "--request-log", "{attempt_dir}/requests.jsonl",
                                       "--stats-out", "{attempt_dir}/server-stats"]
    data["client"]["argv"] += ["--until-signalled"]
    data["client"].update(timeout_s=None)
    attempt_dir, job_id = submit(tmp_path, data, "metrics")
    records = attempt_dir / "results" / "records.jsonl"
    wait_until(lambda: records.exists() and records.read_bytes().count(b"\n") >= 5, 150, "five records")
    gateway = read(attempt_dir, "gateway-state.json")["port"]
    credentials = tmp_path / "key"
    credentials.touch(mode=0o600)
    credentials.write_text(client_key(attempt_dir, data["client"]["env"]["api_key_var"]))
    web = free_port()
    server = subprocess.Popen([str(prometheus), f"--config.file={scrape_config(tmp_path, gateway, credentials)}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{web}"],
                              stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"))
    try:
        wait_until(lambda: _healths(web) == {"dd-slurm-gateway": "up", "without-key": "down"}, 60, "both scraped")
        refused = targets(web)["without-key"]["lastError"]
        status, exposition = get(f"http://127.0.0.1:{gateway}/metrics", credentials.read_text())
        checked = subprocess.run([str(promtool), "check", "metrics"], input=exposition, capture_output=True,
                                 timeout=60)
        assert (200, 0, b"", True, 401) == (status, checked.returncode, checked.stdout + checked.stderr,
                                            "401" in refused, get(f"http://127.0.0.1:{gateway}/metrics", None)[0])
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    subprocess.run([cluster.tool("scancel"), "--batch", "--signal=USR1", job_id], timeout=30, check=True)
    wait_state(attempt_dir, ("done",), 120)
    wait_job_gone(job_id)
    assert ("timed_out", "pre_timeout_signal") == outcome(attempt_dir)
    check_counts_agree(attempt_dir)


def _healths(port: int) -> dict[str, str]:
    try:
        return {job: t["health"] for job, t in targets(port).items()}
    except (OSError, ValueError, KeyError):
        return {}


def check_counts_agree(attempt_dir: Path) -> None:
    replicas = read(attempt_dir, "gateway-stats.json")["aliases"]["small-model"]["replicas"]
    logged: dict[str, int] = {}
    for line in (attempt_dir / "requests.jsonl").read_text().splitlines():
        role = json.loads(line)["role"]
        logged[role] = logged.get(role, 0) + 1
    for replica in replicas:
        role = f"deploy-small-{replica['replica']}"
        own = json.loads((attempt_dir / f"server-stats.{role}.json").read_text())
        counted = replica["server"]
        assert (logged.get(role, 0), True, True) == (
            replica["requests"], abs(counted["generation_tokens"] - own["generation_tokens"])
            <= 0.01 * own["generation_tokens"], abs(counted["prompt_tokens"] - own["prompt_tokens"])
            <= 0.01 * own["prompt_tokens"]), (role, counted, own)
