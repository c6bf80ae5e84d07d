"""What a user runs on the real cluster: `submit --wait`, `logs` (listing, printing, following a
live attempt to its end) and the timeline the supervisor leaves behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.runtime.harness import evidence, plan_data
from tests.slurm import real_attempt
from tests.slurm.real_attempt import EXE, submit, wait_state


def _plan(tmp_path: Path, name: str, **client) -> Path:
    data = plan_data("single-node")
    data["name"] = real_attempt.PREFIX["current"] + name
    data["client"].update(client)
    plan = tmp_path / f"{name}.json"
    plan.write_text(json.dumps(data))
    return plan


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("extra", "code", "end"), [([], 0, "=> succeeded (ok), exit 0"),
                                                    (["--exit-code", "3"], 4, "=> failed (client_failed), exit 4")])
def test_submit_wait_exits_with_the_outcome(tmp_path, cluster, extra, code, end) -> None:
    """`submit --wait` on Slurm: the attempt dir, the job, watch lines with H:MM:SS elapsed, then
    the outcome; exit 0 for success, 4 for a failing client; timeline.md is there at the end."""
    argv = plan_data("single-node")["client"]["argv"] + extra
    plan = _plan(tmp_path, f"wait{code}", argv=argv)
    out = subprocess.run(EXE + ["submit", "--wait", "--interval", "0.5", str(plan), "-w", str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=170, env=cluster.env())
    lines = out.stdout.splitlines()
    assert code == out.returncode, out.stdout + out.stderr
    assert lines[1].startswith("submitted batch job ") and lines[2].startswith("[0:00:0")
    assert any(line.endswith(end) for line in lines), out.stdout
    timeline = (Path(lines[0]) / "timeline.md").read_text()
    assert "| queue wait |" in timeline and "```mermaid\ngantt" in timeline


@pytest.mark.timeout(180)
def test_logs_list_print_and_follow_a_live_attempt(tmp_path) -> None:
    """While the attempt runs, `logs -f DIR client` prints the client's output as it comes and
    ends by itself once the attempt is done; afterwards the listing names the batch, client,
    preflight and deployment logs with their sizes, and `logs DIR batch` prints the batch log."""
    attempt_dir, _job = submit(tmp_path, plan_data("single-node"), "logs")
    wait_state(attempt_dir, ("preflight", "deploying", "ready", "client", "finalize", "cleanup", "done"), 120)
    started = time.monotonic()
    follow = subprocess.run(EXE + ["logs", "-f", str(attempt_dir), "client"], capture_output=True, text=True,
                            timeout=150)
    assert (0, "") == (follow.returncode, follow.stderr)
    assert "wrote 3 records" in follow.stdout
    assert "done" == real_attempt.state_of(attempt_dir) and time.monotonic() - started < 140
    listing = subprocess.run(EXE + ["logs", "--json", str(attempt_dir)], capture_output=True, text=True, timeout=30)
    names = {log["name"]: log["bytes"] for log in json.loads(listing.stdout)}
    assert {"batch", "client", "preflight", "deploy-small-0"} <= set(names) and names["client"] > 0
    batch = subprocess.run(EXE + ["logs", str(attempt_dir), "batch"], capture_output=True, text=True, timeout=30)
    assert batch.stdout.startswith(f"attempt {attempt_dir.name}: done (succeeded, ok)")
    assert os.path.getsize(attempt_dir / "logs" / f"batch-{_job}.out") == names["batch"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("shape", ["single-node", "replicas", "two-deployments"])
def test_a_readiness_timeout_points_at_logs_and_rows_that_exist(tmp_path, cluster, shape) -> None:
    """Every deployment with a wrong health_path (the fake server answers 404 there), for a
    single-node, a replicated and a multi-node deployment: `submit --wait` ends timed_out with the
    last probe in the failure (`HTTP 404 on /wrong: check health_path`), the log to open and its
    last lines; that log exists (`logs DIR NAME` prints it), and `inspect --timeline` has a load
    row for every replica readiness.json names."""
    data = plan_data(shape)
    data["name"] = real_attempt.PREFIX["current"] + "404-" + shape
    for dep in data["deployments"]:
        dep.update(health_path="/wrong", ready_timeout_s=6)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    out = subprocess.run(EXE + ["submit", "--wait", "--interval", "0.5", str(plan), "-w", str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=220, env=cluster.env())
    lines, attempt_dir = out.stdout.splitlines(), out.stdout.split("\n", 1)[0]
    assert 4 == out.returncode, out.stdout + out.stderr
    ends = [i for i, line in enumerate(lines) if line.endswith("=> timed_out (readiness_timeout), exit 4")]
    assert ends, out.stdout + out.stderr + evidence(Path(attempt_dir))
    end = ends[-1]  # the outcome line repeats when the job's state moves after the attempt is done
    failure = re.fullmatch(r"failure: readiness_timeout in deploying: (\S+) not healthy within 6s \(last probe: "
                           r"HTTP 404 on /wrong: check health_path\); see logs/deploy-\1\.log", lines[end + 1])
    assert failure is not None, lines[end + 1]
    log = f"deploy-{failure.group(1)}"
    assert [f"  log to open: dd-slurm logs {attempt_dir} {log}", True] == [
        lines[end + 2], lines[end + 3].startswith("  its last ")]
    shown = subprocess.run(EXE + ["logs", attempt_dir, log], capture_output=True, text=True, timeout=30)
    assert (0, lines[-1].strip()) == (shown.returncode, shown.stdout.splitlines()[-1].strip())
    replicas = sorted(json.loads((Path(attempt_dir) / "readiness.json").read_text())["deployments"])
    timeline = subprocess.run(EXE + ["inspect", "--timeline", attempt_dir], capture_output=True, text=True, timeout=30)
    assert replicas == sorted(re.findall(r"^    (\S+) load ", timeline.stdout, re.MULTILINE)), timeline.stdout
