"""`make bench` rows for node-local weights.

- Staging throughput against `cp -r` of the same tree on the same disk (goal >= 0.9x): a model-like
  tree (four shards and small files), copied by each in alternating runs into fresh directories;
  both read the source from the page cache after the first run and neither syncs.
- Bytes read from the weights' source for 3 replicas on 2 nodes of the lab cluster, staged against
  unstaged (goal: one copy per node): counted from the attempt's own accounts, the staging step's
  journal events (the copies it made) and each server's log line (the path and bytes it read)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.bench.sizes import Sizes
from tests.weights_trees import model_tree

RUNS = 3


def staging_throughput(row: Callable[..., dict], sizes: Sizes) -> list[dict]:
    from dd_slurm.runtime.node.weights import copy_path, stage

    megabytes = 32 if sizes.quick else 1024
    pairs = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as name:
        tmp = Path(name)
        source = model_tree(tmp / "model", megabytes)
        for run in range(1 if sizes.quick else RUNS):
            start = time.perf_counter()
            subprocess.run(["cp", "-r", str(source), str(tmp / f"cp-{run}")], check=True)
            cp_s = time.perf_counter() - start
            target = copy_path(str(source), str(tmp / f"local-{run}"), "bench", None, os.getuid())
            start = time.perf_counter()
            stage(str(source), target, "bench")
            stage_s = time.perf_counter() - start
            pairs.append((cp_s, stage_s))
            shutil.rmtree(tmp / f"cp-{run}")
            shutil.rmtree(tmp / f"local-{run}")
    note = "; ".join(f"cp -r {c:.2f} s, staging {s:.2f} s" for c, s in pairs)
    return [row(f"weights staging throughput against cp -r of the same {megabytes} MB tree, same disk",
                [c / s for c, s in pairs if s], "x", ">= 0.9x", note)]


def source_reads(row: Callable[..., dict], sizes: Sizes, cluster_down: Callable) -> list[dict]:
    """3 replicas on 2 nodes reading a tree, staged and unstaged: bytes read from the source."""
    if down := cluster_down(sizes):
        return [row("bytes read from the weights' source, 3 replicas on 2 nodes", [], "", "", down)]
    from tests.bench.bench import use_host_cluster
    from tests.runtime.harness import plan_data
    from tests.slurm.real_attempt import submit, wait_job_gone, wait_state

    use_host_cluster()
    megabytes = 16 if sizes.quick else 256
    found = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        source = model_tree(tmp / "model", megabytes)
        size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        for stage in ("none", "node_local"):
            data = plan_data("replicas")
            dep = data["deployments"][0]
            dep["weights"] = {"path": str(source), "stage": stage}
            if stage == "node_local":
                dep["weights"]["local_dir"] = str(tmp / "local" / "{node}")
            dep["argv"] += ["--weights", "{weights}"]
            attempt, job = submit(tmp, data, f"bench-weights-{stage.replace('_', '-')}")
            wait_state(attempt, ("done",), 300)
            wait_job_gone(job)
            found[stage] = read_from(attempt, str(source)) / size
    return [row("bytes read from the weights' source, 3 replicas on 2 nodes: unstaged, in tree sizes",
                [found["none"]], "copies", "3 (each replica reads it)", f"{megabytes} MB tree"),
            row("  ... staged node-local: in tree sizes", [found["node_local"]], "copies", "2 (one per node)",
                "the staging step's copies; the servers read the nodes' copies")]


def read_from(attempt: Path, source: str) -> int:
    """Bytes the attempt read from `source`: the copies its staging made, and what each server
    read from the source itself (the fake server's `weights PATH: N files, B bytes` line)."""
    entries = [json.loads(line) for line in (attempt / "journal.jsonl").read_text().splitlines()]
    total = sum(e["bytes"] for e in entries if e.get("trigger") == "weights_staged" and not e["reused"])
    for log in (attempt / "logs").glob("deploy-*.log"):
        for line in log.read_text().splitlines():
            if "]: weights " in line:
                path, _, counts = line.split("]: weights ", 1)[1].rpartition(": ")
                total += int(counts.split(", ")[1].split()[0]) if path == source else 0
    return total
