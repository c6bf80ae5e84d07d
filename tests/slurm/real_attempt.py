"""Run dd-slurm attempts on the real lab cluster from tests: submit, act at a state, wait for done."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from dd_slurm.machine.journal import current_state, read_journal
from tests.runtime.harness import plan_data

EXE = [str(Path(sys.executable).parent / "dd-slurm")]
PREFIX = {"current": "t-"}  # set per test by tests/slurm/conftest.py; its jobs are cancelled after it
CLUSTER: dict = {"current": None}  # the test's lab cluster (tests.slurm.clusters.Cluster), set alike


def submit(tmp_path: Path, data: dict, name: str, env: Optional[dict] = None) -> tuple[Path, str]:
    data = json.loads(json.dumps(data))
    data["name"] = PREFIX["current"] + name
    plan = tmp_path / f"{name}.json"
    plan.write_text(json.dumps(data))
    out = subprocess.run(EXE + ["submit", "--json", str(plan), "-w", str(tmp_path / "ws")], capture_output=True,
                         text=True, timeout=120, env=env or CLUSTER["current"].env())
    assert 0 == out.returncode, out.stderr
    submitted = json.loads(out.stdout)
    return Path(submitted["attempt_dir"]), submitted["job_id"]


def state_of(attempt_dir: Path) -> str:
    return current_state(read_journal(attempt_dir / "journal.jsonl"), "staged")


def wait_state(attempt_dir: Path, states: tuple[str, ...], seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = state_of(attempt_dir)
        if state in states:
            return state
        time.sleep(0.1)
    raise AssertionError(f"{attempt_dir.name} never reached {states}; it is {state_of(attempt_dir)}")


def wait_job_gone(job_id: str, seconds: float = 60) -> None:
    """Until Slurm no longer runs the job (the supervisor has exited and the job completed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out = subprocess.run([CLUSTER["current"].tool("squeue"), "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                             text=True, timeout=30)
        if out.stdout.strip() in ("", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still running")


def default_plan(name: str) -> dict:
    return plan_data(name)
