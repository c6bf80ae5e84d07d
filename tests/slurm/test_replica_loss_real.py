"""An attempt outlives a replica: a replica whose server dies leaves its alias's pool at once, is
marked `lost`, and the attempt goes on while its deployment keeps `min_replicas`; below that it
fails with `replicas_below_min`. On the real cluster, with the server SIGKILLed mid-run."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.runtime.harness import outcome, plan_data, read
from tests.slurm.conftest import wait_until
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state
from tests.slurm.soak import _pid_of, _signal

RECORDS = 400


def loss_plan(replicas: int, min_replicas: int, latency_s: float = 0.1) -> dict:
    """`replicas` fake servers of one alias (one GPU each, on two nodes) answering in `latency_s`
    and logging every request; a client of RECORDS unique requests, 8 at once, retrying 502/503."""
    data = plan_data("replicas")
    data["job"].update(nodes=2, gpus_per_node=2)
    deployment = data["deployments"][0]
    deployment.update(replicas=replicas, min_replicas=min_replicas)
    deployment["argv"] += ["--latency-s", str(latency_s), "--request-log", "{attempt_dir}/requests.jsonl"]
    data["client"]["argv"] += ["--records", str(RECORDS), "--concurrency", "8", "--retries", "8"]
    data["client"]["result"]["min_records"] = RECORDS
    return data


def logged(attempt_dir) -> list[dict]:
    path = attempt_dir / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def kill_server_midway(attempt_dir, victim: str) -> float:
    """SIGKILL the victim's server once 60 requests were served; when it was killed (wall)."""
    wait_until(lambda: len(logged(attempt_dir)) >= 60, 150, "60 requests served")
    assert _signal(_pid_of(attempt_dir, f"steps/{victim}.started.json"), signal.SIGKILL)
    return time.time()


@pytest.mark.timeout(300)
def test_a_killed_replica_is_lost_and_the_attempt_goes_on(tmp_path, cluster) -> None:
    """4 replicas, min_replicas 2: one server SIGKILLed mid-run. The attempt succeeds; every
    request id is in the result exactly once; the killed replica gets no request from 2 s after
    the kill (and the others serve on); endpoints.json marks it `lost`, and the gateway says it
    took it out of rotation for that; the journal names it with the reason; cleanup is clean."""
    attempt_dir, job_id = submit(tmp_path, loss_plan(4, 2), "loss")
    killed_at = kill_server_midway(attempt_dir, "deploy-small-1")
    wait_state(attempt_dir, ("done",), 200)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), (attempt_dir / "journal.jsonl").read_text()
    records = [json.loads(line) for line in (attempt_dir / "results" / "records.jsonl").read_text().splitlines()]
    assert list(range(RECORDS)) == sorted(r["index"] for r in records)
    requests = logged(attempt_dir)
    late = [r for r in requests if r["role"] == "deploy-small-1" and r["t"] > killed_at + 2]
    after = {r["role"] for r in requests if r["t"] > killed_at + 2}
    assert ([], {"deploy-small-0", "deploy-small-2", "deploy-small-3"}) == (late, after)
    states = {r["replica"]: r["state"] for r in read(attempt_dir, "endpoints.json")["models"]["small-model"]["replicas"]}
    events = [json.loads(line) for line in (attempt_dir / "journal.jsonl").read_text().splitlines()]
    losses = [(e["trigger"], e["replica"], e["reason"]) for e in events if e["kind"] == "event"]
    out = read(attempt_dir, "gateway-state.json")["out"]
    assert ({0: "serving", 1: "lost", 2: "serving", 3: "serving"}, [("lose_replica", "small-1", "server_crashed")],
            {"small/1": "lost"}) == (states, losses, {name: o["why"] for name, o in out.items()})
    assert "clean" == read(attempt_dir, "cleanup.json")["verdict"], read(attempt_dir, "cleanup.json")


@pytest.mark.timeout(300)
def test_losing_a_replica_below_min_replicas_fails_the_attempt(tmp_path, cluster) -> None:
    """2 replicas, min_replicas 2: one server SIGKILLed mid-run fails the attempt with
    replicas_below_min, naming the replica; cleanup is clean."""
    attempt_dir, job_id = submit(tmp_path, loss_plan(2, 2), "below-min")
    kill_server_midway(attempt_dir, "deploy-small-0")
    wait_state(attempt_dir, ("done",), 200)
    wait_job_gone(job_id)
    final = [json.loads(line) for line in (attempt_dir / "journal.jsonl").read_text().splitlines()][-1]
    assert (("failed", "replicas_below_min"), True) == (outcome(attempt_dir), "small-0" in final["detail"])
    assert "clean" == read(attempt_dir, "cleanup.json")["verdict"], read(attempt_dir, "cleanup.json")


@pytest.mark.timeout(300)
def test_a_killed_replica_restarts_in_place_and_serves_again(tmp_path, cluster) -> None:
    """restart {max: 1, backoff_s: 1}: the SIGKILLed replica is started again as new steps on the
    same node and GPUs, is serving again within its ready timeout + 10 s of the kill, and gets
    requests; every record is written once; the journal has the loss and the restart; endpoints
    say serving; cleanup is clean."""
    data = loss_plan(4, 4, latency_s=0.3)
    data["deployments"][0]["restart"] = {"max": 1, "backoff_s": 1}
    attempt_dir, job_id = submit(tmp_path, data, "restart")
    killed_at = kill_server_midway(attempt_dir, "deploy-small-1")
    wait_state(attempt_dir, ("done",), 200)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), (attempt_dir / "journal.jsonl").read_text()
    records = [json.loads(line) for line in (attempt_dir / "results" / "records.jsonl").read_text().splitlines()]
    again = [r["t"] for r in logged(attempt_dir) if r["role"] == "deploy-small-1-r1"]
    events = [json.loads(line) for line in (attempt_dir / "journal.jsonl").read_text().splitlines()]
    states = {r["replica"]: r["state"] for r in read(attempt_dir, "endpoints.json")["models"]["small-model"]["replicas"]}
    assert (list(range(RECORDS)), True, [("lose_replica", "small-1"), ("restart_replica", "small-1")],
            {0: "serving", 1: "serving", 2: "serving", 3: "serving"}) == (
        sorted(r["index"] for r in records), bool(again) and min(again) - killed_at < 60 + 10,
        [(e["trigger"], e["replica"]) for e in events if e["kind"] == "event"], states)
    started = read(attempt_dir, "steps/deploy-small-1-r1.started.json")
    first = read(attempt_dir, "steps/deploy-small-1.started.json")
    assert (first["node"], "clean") == (started["node"], read(attempt_dir, "cleanup.json")["verdict"])
