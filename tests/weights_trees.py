"""What the weights tests and benchmarks share: a model-like tree to stage, a plan that stages it,
and what an attempt says of it (its `weights_staged` journal events, the paths its servers read)."""

from __future__ import annotations

import filecmp
import json
import os
from pathlib import Path
from typing import Optional

from tests.runtime.harness import plan_data


def model_tree(top: Path, megabytes: int = 4) -> Path:
    """A model-like tree: a config, a tokenizer and four weight shards sharing `megabytes` (at
    least one each), random bytes."""
    (top / "tokenizer").mkdir(parents=True)
    (top / "config.json").write_text('{"architectures": ["Fake"]}')
    (top / "tokenizer" / "tokenizer.json").write_bytes(os.urandom(4096))
    for i in range(4):
        with open(top / f"model-0000{i}-of-00004.safetensors", "wb") as handle:
            for _ in range(max(1, megabytes // 4)):
                handle.write(os.urandom(1 << 20))
    return top


def weights_plan(source: Path, local_dir: str, ready_timeout_s: Optional[float] = None) -> dict:
    """replicas.json: 3 replicas on 2 nodes of 2 GPU slots (two on the first, one on the second),
    its weights staged to `local_dir`; each server reads `{weights}` whole while it loads."""
    data = plan_data("replicas")
    dep = data["deployments"][0]
    dep["weights"] = {"path": str(source), "stage": "node_local", "local_dir": local_dir}
    dep["argv"] += ["--weights", "{weights}"]
    if ready_timeout_s is not None:
        dep["ready_timeout_s"] = ready_timeout_s
    return data


def staged_events(attempt_dir: Path) -> list[dict]:
    """The journal's `weights_staged` events, by node."""
    entries = [json.loads(line) for line in (attempt_dir / "journal.jsonl").read_text().splitlines()]
    return sorted((e for e in entries if e.get("trigger") == "weights_staged"), key=lambda e: e["node"])


def loaded_paths(attempt_dir: Path) -> list[str]:
    """The path each server read its weights from (the fake server's `weights PATH: ...` line), sorted."""
    return sorted(line.split("]: weights ", 1)[1].rsplit(": ", 1)[0] for log in (attempt_dir / "logs").glob("deploy-*.log")
                  for line in log.read_text().splitlines() if "]: weights " in line)


def same_tree(left: Path, right: Path) -> bool:
    """The two trees hold the same names and the same bytes."""
    cmp = filecmp.dircmp(left, right)
    match, mismatch, errors = filecmp.cmpfiles(left, right, cmp.common_files, shallow=False)
    return not (cmp.left_only or cmp.right_only or mismatch or errors) and \
        all(same_tree(left / d, right / d) for d in cmp.common_dirs)
