"""The gateway on real Slurm with the real Data Designer client: load spread over every replica
of one alias, and backpressure (429 + Retry-After) that the client's adaptive admission obeys
without any request reaching a server twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.runtime.harness import no_leftovers, outcome, plan_data, read
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state

REPLICAS = 3


def _one_alias_plan(records: int, parallel: int, server_args: list[str], max_inflight: int = 256,
                    gateway: dict | None = None) -> dict:
    """The demo's client against one alias served by three 1-GPU replicas on automatic ports; each
    replica logs every completion request it receives into the results dir."""
    data = plan_data("demo")
    small = data["deployments"][1]
    small.update(replicas=REPLICAS, max_inflight=max_inflight)
    small["argv"] += ["--request-log", "{results_dir}/requests-{host}-{port}.jsonl", *server_args]
    data["deployments"] = [small]
    data["job"].update(nodes=3, gpus_per_node=1)
    for key in ("argv", "preflight_argv"):
        argv = data["client"][key]
        argv += ["--parallel", str(parallel)]
    argv = data["client"]["argv"]
    argv[argv.index("--records") + 1] = str(records)
    data["client"]["result"]["min_records"] = records
    data["client"]["timeout_s"] = 600
    if gateway:
        data["gateway"] = gateway
    return data


def _run(tmp_path: Path, data: dict, name: str) -> Path:
    attempt_dir, job_id = submit(tmp_path, data, name)
    wait_state(attempt_dir, ("done",), 420)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), (attempt_dir / "logs" / "client.log").read_text()[-3000:]
    assert [] == no_leftovers(attempt_dir.name)
    return attempt_dir


def _requests_seen(attempt_dir: Path) -> list[dict]:
    return [json.loads(line) for log in sorted((attempt_dir / "results").glob("requests-*.jsonl"))
            for line in log.read_text().splitlines()]


def _cell_prompts(attempt_dir: Path) -> list[str]:
    """The prompts of generated cells (each names its record); the client's own checks are not cells."""
    return [r["prompt"] for r in _requests_seen(attempt_dir) if "(record " in r["prompt"]]


def _per_replica(stats: dict) -> dict[str, int]:
    alias = stats["aliases"]["small-model"]
    return {f"{r['deployment']}-{r['replica']}": r["requests"] for r in alias["replicas"]}


@pytest.mark.timeout(480)
def test_one_alias_over_three_replicas_spreads_the_load(tmp_path, cluster) -> None:
    """60 records through the gateway's one URL: endpoints.json has one url per alias (the
    gateway's), and each of the three replicas served between 20% and 47% of the requests."""
    attempt_dir = _run(tmp_path, _one_alias_plan(60, 8, []), "spread")
    endpoints = read(attempt_dir, "endpoints.json")
    url = endpoints["models"]["small-model"]["url"]
    assert (["small-model"], True, REPLICAS) == (list(endpoints["models"]), url.startswith("http://127.0.0.1:"),
                                                 len(endpoints["models"]["small-model"]["replicas"]))
    served = _per_replica(read(attempt_dir, "gateway-stats.json"))
    total = sum(served.values())
    shares = sorted(round(n / total, 3) for n in served.values())
    assert (REPLICAS, True) == (len(served), all(0.20 <= s <= 0.47 for s in shares)), (served, shares)
    assert 60 == len(_cell_prompts(attempt_dir))  # one request per generated cell reached a server


@pytest.mark.timeout(480)
def test_overload_gets_429s_the_client_backs_off_and_nothing_is_sent_twice(tmp_path, cluster) -> None:
    """Replicas that serve 2 at once (0.3 s each), max_inflight 2, a queue of 4, and a client
    asking for 16 in parallel: the gateway answers 429s, the client slows down and still writes
    every record, and the servers together received exactly one request per generated LLM cell."""
    data = _one_alias_plan(40, 16, ["--capacity", "2", "--latency-s", "0.3"], max_inflight=2,
                           gateway={"queue_limit": 4, "queue_timeout_s": 5})
    attempt_dir = _run(tmp_path, data, "overload")
    stats = read(attempt_dir, "gateway-stats.json")["aliases"]["small-model"]
    records = (attempt_dir / "results" / "records.jsonl").read_text().splitlines()
    cells = _cell_prompts(attempt_dir)
    issued_429 = sum(stats["rejected_429"].values())
    assert (40, True, 40, 40) == (len(records), issued_429 > 0, len(cells), len(set(cells))), stats
    assert all(r["peak_inflight"] <= 2 for r in stats["replicas"]), stats


ATTACKS = ["smuggling", "control_character", "slow_keyless_head", "large_keyless_body", "abandoned_request",
           "slow_upload", "keyless_stats", "still_serving"]


def _attack_plan() -> dict:
    """One replica (each completion takes 2 s, every request logged), a gateway with a 1 s header
    timeout and a 4 s stall timeout, and the hostile client (dd_slurm/testing/attack_client.py)
    as the attempt's client, with the attempt key in its environment."""
    data = _one_alias_plan(1, 1, ["--latency-s", "2"], gateway={"header_timeout_s": 1, "stall_timeout_s": 4})
    data["deployments"][0]["replicas"] = 1
    data["job"].update(nodes=1)
    data["client"].update(argv=["/usr/bin/python3", "{attempt_dir}/bundle/lib/dd_slurm/testing/attack_client.py",
                                "--endpoints", "{endpoints_file}", "--out", "{results_dir}/attacks.jsonl",
                                "--alias", "small-model", "--api-key-env", "OPENAI_API_KEY",
                                "--header-timeout-s", "1", "--upload-s", "6"],
                          preflight_argv=None, result={"path": "attacks.jsonl", "format": "jsonl",
                                                       "min_records": len(ATTACKS)})
    return data


@pytest.mark.timeout(480)
def test_the_gateway_of_a_submitted_attempt_holds_against_a_hostile_client(tmp_path, cluster) -> None:
    """Attacked from the allocation as a cluster user would (raw sockets at the logical URL): the
    smuggling, control-character, key-less slow-head, key-less large-body, abandoned-request,
    slow-upload and key-less stats attacks all hold; the replica never received the smuggled
    prompt; the attempt succeeds and leaves nothing behind."""
    attempt_dir = _run(tmp_path, _attack_plan(), "attack")
    verdicts = [json.loads(line) for line in (attempt_dir / "results" / "attacks.jsonl").read_text().splitlines()]
    prompts = [r["prompt"] for r in _requests_seen(attempt_dir)]
    assert ATTACKS == [v["attack"] for v in verdicts]
    assert [] == [v for v in verdicts if not v["held"]]
    assert (False, False) == (any("SMUGGLED" in p for p in prompts), any("ctl" == p for p in prompts)), prompts
