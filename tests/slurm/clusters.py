"""The lab clusters the real-Slurm tests run against: one per Slurm release (fixtures/cluster/
versions.tsv), each reached through its own DD_SLURM_BIN_DIR, as `clusters.sh status` reports it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Optional

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_DIR = ROOT / "fixtures" / "cluster"
CLUSTERS_SH = CLUSTER_DIR / "clusters.sh"
KEY = "dd_slurm_clusters_up"  # "VERSION=BIN_DIR ...": found once by the controller, handed to xdist workers
ERROR_KEY = "dd_slurm_clusters_error"


@attrs.frozen
class Cluster:
    version: str
    bin_dir: str
    net: str  # n1-n3 are net.1-3
    proctrack: str = "linuxproc"  # its ProctrackType, as versions.tsv gives it

    def tool(self, name: str) -> str:
        return f"{self.bin_dir}/{name}"

    def env(self, base: Optional[dict] = None) -> dict[str, str]:
        """`base` (default: this process's environment) pointed at this cluster's tools."""
        env = dict(os.environ if base is None else base)
        env["DD_SLURM_BIN_DIR"] = self.bin_dir
        env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def addr(self, node: str) -> str:
        return f"{self.net}.{node.lstrip('n')}"

    def control(self, *args: str) -> None:
        """One cluster command (dbd-stop, node-kill n3, ...) on this cluster only."""
        subprocess.run(["bash", str(CLUSTERS_SH), self.version, *args], check=True, timeout=180, capture_output=True)


def table() -> dict[str, dict[str, str]]:
    rows = {}
    for line in (CLUSTER_DIR / "versions.tsv").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            rows[fields[0]] = {"root": fields[1], "net": fields[2], "proctrack": fields[8]}
    return rows


def probe(wanted: Optional[str]) -> tuple[str, list[str]]:
    """("VERSION=BIN_DIR ..." of the clusters up, status lines of those down) among `wanted`
    ("22.05 24.11"; None: every known release)."""
    env = {k: v for k, v in os.environ.items() if k != "CLUSTERS"}
    if wanted:
        env["CLUSTERS"] = wanted
    out = subprocess.run(["bash", str(CLUSTERS_SH), "status"], capture_output=True, text=True, timeout=120, env=env)
    up, down = [], []
    for line in out.stdout.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[1].startswith("DD_SLURM_BIN_DIR="):
            continue
        if fields[2] == "up":
            up.append(f"{fields[0]}={fields[1].partition('=')[2]}")
        else:
            down.append(line)
    if not up and not down and out.stderr.strip():
        down.append(out.stderr.strip().splitlines()[-1])
    return " ".join(up), down


def configure(config) -> None:
    """Once per run, in the controller: which clusters are up (xdist workers get the answer)."""
    if hasattr(config, "workerinput"):
        setattr(config, KEY, config.workerinput.get(KEY, ""))
        setattr(config, ERROR_KEY, config.workerinput.get(ERROR_KEY, ""))
        return
    wanted = os.environ.get("DD_SLURM_TEST_CLUSTERS") or None
    up, down = probe(wanted)
    setattr(config, KEY, up)
    failed = (wanted and down) or not up
    setattr(config, ERROR_KEY, ("; ".join(down) or "no cluster answers") if failed else "")


def under_test(config) -> list[Cluster]:
    """The clusters found up, in release order. DD_SLURM_TEST_CLUSTERS="22.05 24.11" requires
    exactly those; unset, every cluster that is up is tested, and none up is an error."""
    if getattr(config, ERROR_KEY, ""):
        raise pytest.UsageError(f"the lab Slurm clusters are not up (make cluster-up, or DD_SLURM_TEST_CLUSTER=down "
                                f"to skip the real-Slurm tests): {getattr(config, ERROR_KEY)}")
    rows = table()
    found = dict(item.split("=", 1) for item in getattr(config, KEY, "").split())
    clusters = [Cluster(v, found[v], rows[v]["net"], rows[v]["proctrack"]) for v in rows if v in found]
    if not clusters:  # not looked for (DD_SLURM_TEST_CLUSTER=down): collected, then skipped
        first, row = next(iter(rows.items()))
        clusters = [Cluster(first, "/usr/bin", row["net"], row["proctrack"])]
    return clusters
