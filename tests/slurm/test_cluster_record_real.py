"""An attempt knows its cluster: `submit` records Slurm's ClusterName and the tools it used, and
`status` and `cancel` ask that cluster from a shell pointed at another one. A job id that is
another job's there (the attempt's record without its cluster, asked of the wrong cluster) is an
error, never a cancel. The other cluster is a fake Slurm whose job has the same id and another name."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dd_slurm.store.attempt_record import update_record
from dd_slurm.testing.fake_slurm import install
from tests.runtime.harness import outcome, plan_data
from tests.slurm.real_attempt import EXE, submit, wait_state


def other_cluster(tmp_path: Path, job_id: str):
    """A fake cluster where `job_id` is someone else's running job."""
    fake = install(tmp_path / "other-bin")
    with fake.edit() as state:
        state["jobs"][job_id] = {"id": job_id, "name": "someone-else", "held": False, "array": None, "pid": None,
                                 "cancelled_by": None, "in_squeue": True, "in_sacct": True, "state": "RUNNING",
                                 "reason": None, "exit": None}
    return fake


def cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(EXE + list(args), capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.timeout(240)
def test_status_and_cancel_ask_the_cluster_the_attempt_was_submitted_to(tmp_path, cluster) -> None:
    """Submitted to this lab cluster, looked at from a shell whose DD_SLURM_BIN_DIR names another
    cluster: the record names the cluster (ClusterName and tools), `status` reports the job running
    (not lost), and `cancel` cancels it there; the other cluster's job with the same id is not
    touched, and is never asked about."""
    data = plan_data("single-node")
    data["client"]["argv"] += ["--hang"]
    attempt_dir, job_id = submit(tmp_path, data, "where")
    wait_state(attempt_dir, ("client",), 120)
    record = json.loads((attempt_dir / "attempt.json").read_text())
    config = subprocess.run([cluster.tool("scontrol"), "show", "config"], capture_output=True, text=True, timeout=30)
    name = next(line.split("=", 1)[1].strip() for line in config.stdout.splitlines() if line.startswith("ClusterName"))
    assert {"name": name, "bin_dir": cluster.bin_dir, "slurm_conf": None} == record["cluster"]
    other = other_cluster(tmp_path, job_id)
    elsewhere = {**cluster.env(), "DD_SLURM_BIN_DIR": str(other.bin_dir)}
    status = cli("status", "--json", str(attempt_dir), env=elsewhere)
    assert (0, "running") == (status.returncode, json.loads(status.stdout)["scheduler"]["state"]), status.stderr
    cancelled = cli("cancel", "--json", str(attempt_dir), env=elsewhere)
    assert (0, True) == (cancelled.returncode, json.loads(cancelled.stdout)["cancel_requested"]), cancelled.stderr
    wait_state(attempt_dir, ("done",), 120)
    assert ("cancelled", []) == (outcome(attempt_dir)[0], other.calls())


@pytest.mark.timeout(240)
def test_a_job_id_that_is_another_jobs_is_an_error_never_a_cancel(tmp_path, cluster) -> None:
    """A record without its cluster (written before submit recorded it) asked of a cluster where
    its job id is another job: `status` exits 3 naming both names, `cancel` exits 3 and sends no
    scancel; the attempt's own job runs on, and cancels from its own cluster."""
    data = plan_data("single-node")
    data["client"]["argv"] += ["--hang"]
    attempt_dir, job_id = submit(tmp_path, data, "foreign")
    wait_state(attempt_dir, ("client",), 120)
    with update_record(attempt_dir) as record:
        record["cluster"] = None
        job_name = record["job_name"]
    other = other_cluster(tmp_path, job_id)
    elsewhere = {**cluster.env(), "DD_SLURM_BIN_DIR": str(other.bin_dir)}
    expected = (f"job {job_id} here is 'someone-else', not this attempt's {job_name!r}: "
                "the id belongs to another job")
    status, cancel = cli("status", str(attempt_dir), env=elsewhere), cli("cancel", str(attempt_dir), env=elsewhere)
    assert [3, 3, True, True, []] == [status.returncode, cancel.returncode, expected in status.stderr,
                                      expected in cancel.stderr, other.calls("scancel")], (status.stderr, cancel.stderr)
    assert "client" == wait_state(attempt_dir, ("client",), 5)
    assert 0 == cli("cancel", str(attempt_dir), env=cluster.env()).returncode
    wait_state(attempt_dir, ("done",), 120)
