"""A stop while the client runs loses nothing it wrote: the gateway drains (nothing new admitted,
what is in flight finishes), the client gets its stop signal and grace to seal its output, and
what it wrote is kept as a partial result."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.runtime.harness import outcome, plan_data, read
from tests.slurm.conftest import wait_until
from tests.slurm.real_attempt import EXE, submit, wait_job_gone, wait_state


def complete_lines(path) -> int:
    return path.read_bytes().count(b"\n")


@pytest.mark.timeout(240)
def test_the_pre_timeout_signal_drains_and_keeps_the_records_written(tmp_path, cluster) -> None:
    """USR1 to the batch step (what `--signal=B:USR1@N` sends) while a client writes records
    until signalled: the outcome is timed_out (pre_timeout_signal); the gateway drained with
    nothing in flight; the client stopped on SIGTERM and exited 0; the result manifest keeps the
    file as partial, counting its complete lines only (the client left half a line at the end,
    and asked for more records than it wrote); status says the same; cleanup is clean."""
    data = plan_data("single-node")
    data["client"]["argv"] += ["--until-signalled", "--torn-tail"]
    data["client"].update(stop_grace_s=10, timeout_s=None)
    data["client"]["result"]["min_records"] = 100000
    data["gateway"] = {"drain_s": 10}
    attempt_dir, job_id = submit(tmp_path, data, "drain")
    records = attempt_dir / "results" / "records.jsonl"
    wait_until(lambda: records.exists() and complete_lines(records) >= 5, 150, "five records")
    subprocess.run([cluster.tool("scancel"), "--batch", "--signal=USR1", job_id], timeout=30, check=True)
    wait_state(attempt_dir, ("done",), 120)
    wait_job_gone(job_id)
    assert ("timed_out", "pre_timeout_signal") == outcome(attempt_dir)
    manifest, cleanup = read(attempt_dir, "result-manifest.json"), read(attempt_dir, "cleanup.json")
    assert (True, complete_lines(records), True) == (manifest["partial"], manifest["records"],
                                                    records.read_bytes().endswith(b'{"alias": "torn'))
    client = next(p for p in cleanup["processes"] if p["name"] == "client")
    assert ("clean", "stopped by SIGTERM (exit 0)", True) == (
        cleanup["verdict"], client["how"], any(n.startswith("gateway drained in") for n in cleanup["notes"]))
    stats = read(attempt_dir, "gateway-stats.json")
    assert [0] == sorted({r["inflight"] for a in stats["aliases"].values() for r in a["replicas"]})
    status = json.loads(subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True,
                                       timeout=60, env=cluster.env()).stdout)
    assert {"path": "records.jsonl", "records": manifest["records"], "partial": True} == status["result"]


@pytest.mark.timeout(360)
def test_at_the_real_time_limit_the_drain_fits_before_slurm_ends_the_job(tmp_path, cluster) -> None:
    """time_limit 3 min, pre_timeout_signal_s 60 (Slurm sends USR1 up to a minute early): the
    client runs until signalled; the attempt ends timed_out (pre_timeout_signal) with the partial
    result counting the file's complete lines, a clean cleanup, and the job itself ends before
    Slurm's limit (its state is not `timeout`)."""
    data = plan_data("single-node")
    data["job"].update(time_limit="00:03:00", pre_timeout_signal_s=60)
    data["client"]["argv"] += ["--until-signalled"]
    data["client"].update(stop_grace_s=10, timeout_s=None)
    data["gateway"] = {"drain_s": 10}
    attempt_dir, job_id = submit(tmp_path, data, "time-limit-drain")
    wait_state(attempt_dir, ("done",), 300)
    wait_job_gone(job_id)
    records = attempt_dir / "results" / "records.jsonl"
    manifest, cleanup = read(attempt_dir, "result-manifest.json"), read(attempt_dir, "cleanup.json")
    status = json.loads(subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True,
                                       timeout=60, env=cluster.env()).stdout)
    assert (("timed_out", "pre_timeout_signal"), True, complete_lines(records), "clean") == (
        outcome(attempt_dir), manifest["partial"], manifest["records"], cleanup["verdict"])
    assert status["scheduler"]["state"] != "timeout" and manifest["records"] > 0, status["scheduler"]
