"""Faults of the cluster itself. These stop daemons, so they run alone (marker cluster_fault)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import PLANS
from tests.slurm.conftest import wait_until

pytestmark = pytest.mark.cluster_fault


def _plan(tmp_path, name: str, deadline: float):
    plan = json.loads((PLANS / "single-node.json").read_text())
    plan["name"] = name
    plan["runtime"].update(python="/bin/true", reconcile_deadline_s=deadline)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(plan))
    return path


def _status(exe, attempt_dir, cluster):
    out = subprocess.run(exe + ["status", "--json", attempt_dir], capture_output=True, text=True, timeout=90,
                         env=cluster.env())
    assert 0 == out.returncode, out.stderr
    return json.loads(out.stdout)["scheduler"]


@pytest.mark.timeout(400)
def test_accounting_lag_while_slurmdbd_is_down_then_resolved(tmp_path, dd_slurm_exe, cluster) -> None:
    """slurmdbd down: a finished job that left squeue is accounting_lag (non-terminal); past its
    reconcile deadline it is lost (terminal); once slurmdbd is back the replayed sacct record wins."""
    status = lambda attempt: _status(dd_slurm_exe, attempt, cluster)
    cluster.control("dbd-stop")
    try:
        attempts = {}
        for name, deadline in (("lag-long", 600.0), ("lag-short", 5.0)):
            argv = ["submit", "--json", str(_plan(tmp_path, name, deadline)), "-w", str(tmp_path / "ws")]
            out = subprocess.run(dd_slurm_exe + argv, capture_output=True, text=True, timeout=90, env=cluster.env())
            assert 0 == out.returncode, out.stderr
            attempts[name] = json.loads(out.stdout)["attempt_dir"]
        for attempt in attempts.values():
            status(attempt)  # seen in squeue: the deadline counts from here
        long = wait_until(lambda: (lambda s: s if s["source"] == "none" else None)(status(attempts["lag-long"])),
                          180, "the finished job to leave squeue", interval=3)
        assert ("accounting_lag", False) == (long["state"], long["terminal"])
        assert long["reason"].startswith("sacct failed")
        short = wait_until(lambda: (lambda s: s if s["state"] == "lost" else None)(status(attempts["lag-short"])),
                           60, "lost after the short deadline", interval=2)
        assert short["terminal"]
    finally:
        cluster.control("dbd-start")
    for attempt in attempts.values():
        done = wait_until(lambda a=attempt: (lambda s: s if s["source"] == "sacct" else None)(status(a)),
                          120, "sacct to replay the record", interval=3)
        assert ("completed", True, 0) == (done["state"], done["terminal"], done["exit_code"])


def test_controller_down_is_a_clear_tool_failure(dd_slurm_exe, cluster) -> None:
    """slurmctld down: `dd-slurm query` exits 3 with one line naming the problem, no traceback."""
    cluster.control("ctld-stop")
    try:
        out = subprocess.run(dd_slurm_exe + ["query", "1"], capture_output=True, text=True, timeout=120,
                             env=cluster.env())
    finally:
        cluster.control("ctld-start")
    assert 3 == out.returncode
    assert 1 == len(out.stderr.strip().splitlines())
    assert "Unable to contact slurm controller" in out.stderr


@pytest.mark.timeout(400)
def test_a_killed_node_ends_its_job_as_node_fail(tmp_path, job_prefix, real_commands, cluster) -> None:
    """slurmd on n3 killed under a running job: once the controller declares the node dead, the
    job is observed as node_fail (terminal); the node is brought back afterwards."""
    from dd_slurm.clock import Clock
    from dd_slurm.scheduler.query import query
    from tests.slurm.conftest import write_script

    script = write_script(tmp_path, "nf", "sleep 600", f"--job-name={job_prefix}nf", "--nodelist=n3",
                          "--output=/dev/null", "--no-requeue")
    job = real_commands.submit(script, f"{job_prefix}nf").job_id
    wait_until(lambda: query([job], real_commands, Clock())[0].state == "running", 60, "the job running on n3")
    cluster.control("node-kill", "n3")
    try:
        found = wait_until(lambda: (lambda o: o if o.terminal else None)(query([job], real_commands, Clock())[0]),
                           180, "the job to end after n3 died", interval=2)
    finally:
        cluster.control("node-start", "n3")
    assert ("node_fail", True) == (found.state, found.terminal), found
