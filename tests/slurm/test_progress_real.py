"""While the client runs, `status` shows its progress from fresh processes: the gateway's live
stats (rewritten every few seconds) and the records written so far."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.harness import plan_data
from tests.slurm.conftest import wait_until
from tests.slurm.real_attempt import EXE, submit, wait_job_gone, wait_state


@pytest.mark.timeout(240)
def test_status_shows_the_running_client_s_progress(tmp_path, cluster) -> None:
    """A client that writes records until stopped: `status --json` gets a request rate > 0 and a
    record count that grows; `status --watch` shows the progress on its own line under the state
    line, both within 80 columns; the client, which has the key, read the gateway's /metrics
    (prometheus_client parses it; at least the 5 requests so far) and got 401 without the key; then
    the attempt is cancelled (and drains)."""
    data = plan_data("single-node")
    data["client"]["argv"] += ["--until-signalled", "--metrics-out", "{results_dir}/metrics.txt"]
    data["client"].update(timeout_s=None, stop_grace_s=5)
    data["client"]["env"]["api_key_var"] = "OPENAI_API_KEY"  # the gateway then requires the attempt key
    data["client"]["result"]["min_records"] = 1000000
    data["gateway"] = {"drain_s": 5}
    attempt_dir, job_id = submit(tmp_path, data, "progress")
    wait_state(attempt_dir, ("client",), 150)

    def progress() -> dict:
        done = subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True,
                              timeout=60, env=cluster.env())
        return json.loads(done.stdout).get("progress") or {}

    first = wait_until(lambda: (p := progress()).get("req_per_s") and p, 60, "a request rate in status")
    time.sleep(2)
    later = progress()
    watch = subprocess.Popen(EXE + ["status", "--watch", "--interval", "0.5", str(attempt_dir)], env=cluster.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first_lines = [watch.stdout.readline(), watch.stdout.readline()]
    subprocess.run(EXE + ["cancel", str(attempt_dir)], capture_output=True, timeout=60, env=cluster.env(), check=True)
    watch.communicate(timeout=120)
    wait_state(attempt_dir, ("done",), 120)
    wait_job_gone(job_id)
    assert (True, True, True) == (first["req_per_s"] > 0, later["records"] > first["records"] > 0,
                                  later["requests"] >= first["requests"] > 0)
    metrics = {f.name: f for f in text_string_to_metric_families((attempt_dir / "results" / "metrics.txt").read_text())}
    assert (True, "401") == (metrics["dd_slurm_gateway_requests"].samples[0].value >= 5,
                             (attempt_dir / "results" / "metrics.txt.without-key").read_text().strip())
    state, shown = (line.rstrip("\n") for line in first_lines)
    assert (True, True, True) == (" client " in state, " records  " in shown and " req/s" in shown,
                                  max(len(state), len(shown)) <= 80), first_lines
