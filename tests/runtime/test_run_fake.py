"""End-to-end attempts on fake Slurm: sequencing, endpoints, results, environments, cleanup."""

from __future__ import annotations

import json

from tests.runtime.harness import journal, no_leftovers, plan_data, read, run, servers_started

HAPPY = [("staged", "verified", None), ("verified", "preflight", None), ("preflight", "deploying", None),
         ("deploying", "ready", None), ("ready", "client", None), ("client", "finalize", None),
         ("finalize", "cleanup", "ok"), ("cleanup", "done", "ok")]


def test_single_node_plan_succeeds_and_leaves_nothing(tmp_path, fake_slurm) -> None:
    """The one-node plan walks every state once, validates 3 records, publishes its endpoint,
    ends with a terminal readiness record, a clean cleanup report and no process left."""
    attempt, staged = run(tmp_path, fake_slurm, plan_data("single-node"))
    directory = staged.attempt_dir
    assert ("succeeded", "ok") == (attempt.outcome, attempt.reason)
    assert HAPPY == journal(directory)
    manifest = read(directory, "result-manifest.json")
    assert ("records.jsonl", 3) == (manifest["path"], manifest["records"])
    readiness = read(directory, "readiness.json")
    assert ("withdrawn", "stopped") == (readiness["endpoints"], readiness["deployments"]["small-0"]["state"])
    assert "clean" == read(directory, "cleanup.json")["verdict"]
    assert [] == no_leftovers(staged.attempt_id)


def test_two_node_deployment_with_follower_and_a_second_deployment(tmp_path, fake_slurm) -> None:
    """big spans nodes 1-2 (leader + follower) on GPU slots 0,1 of each; small gets node 3, slot 0;
    the endpoints file (schema 2) gives each alias its leader's URL and its one replica."""
    data = plan_data("two-deployments")
    attempt, staged = run(tmp_path, fake_slurm, data)
    assert "succeeded" == attempt.outcome
    started = {p.name.split(".")[0]: json.loads(p.read_text())
               for p in (staged.attempt_dir / "steps").glob("deploy-*.started.json")}
    placed = {name: (r["node"], r["cuda_visible_devices"]) for name, r in started.items()}
    assert {"deploy-big-0": ("127.0.2.1", "0,1"), "deploy-big-0-1": ("127.0.2.2", "0,1"),
            "deploy-small-0": ("127.0.2.3", "0")} == placed
    endpoints = read(staged.attempt_dir, "endpoints.json")
    big_url = f"http://127.0.2.1:{data['deployments'][0]['port']}/v1"
    assert (2, "withdrawn", {"big-model", "small-model"}) == (endpoints["schema"], endpoints["state"],
                                                             set(endpoints["models"]))
    gateway = read(staged.attempt_dir, "gateway-state.json")
    assert {"url": f"http://127.0.0.1:{gateway['port']}/big-model/v1",
            "replicas": [{"deployment": "big", "replica": 0, "base_url": big_url, "state": "serving"}]} == \
        endpoints["models"]["big-model"]
    assert [] == no_leftovers(staged.attempt_id)


def test_steps_get_only_their_explicit_environment(tmp_path, fake_slurm) -> None:
    """A secret in the supervisor's environment that the plan does not name never reaches a step;
    forwarded and set variables do, with the runtime's own DD_SLURM_* and the step's SLURM_*."""
    data = plan_data("single-node")
    dump = "import json, os; json.dump(dict(os.environ), open('{results_dir}/env.json', 'w'))"
    data["client"].update(argv=["/usr/bin/python3", "-c", dump], preflight_argv=None,
                          env={"set": {"MODE": "test"}, "forward": ["HF_TOKEN"]},
                          result={"path": "env.json", "format": "json", "min_records": 1})
    attempt, staged = run(tmp_path, fake_slurm, data, HF_TOKEN="hf-123", AWS_SECRET_ACCESS_KEY="leak",
                          SLURM_CPU_BIND="none")
    env = read(staged.attempt_dir, "results/env.json")
    assert "succeeded" == attempt.outcome
    assert ("test", "hf-123", "client", staged.attempt_id) == (
        env["MODE"], env["HF_TOKEN"], env["DD_SLURM_ROLE"], env["DD_SLURM_ATTEMPT_ID"])
    assert {"AWS_SECRET_ACCESS_KEY", "SLURM_CPU_BIND", "CUDA_VISIBLE_DEVICES"}.isdisjoint(env)
    expected_names = {"PATH", "LC_ALL", "MODE", "HF_TOKEN", "DD_SLURM_ATTEMPT_ID", "DD_SLURM_ROLE",
                      "DD_SLURM_ATTEMPT_DIR", "DD_SLURM_ENDPOINTS_FILE"}
    assert expected_names == {k for k in env if not k.startswith("SLURM")}


def test_gateway_starts_while_the_servers_load_and_is_routed_at_ready(tmp_path, fake_slurm) -> None:
    """The gateway's step is launched in `deploying` (its start-up overlaps the 1 s load), its
    config is written only once every replica is ready, and it logs that it waited for it."""
    attempt, staged = run(tmp_path, fake_slurm, plan_data("single-node"))
    directory = staged.attempt_dir
    ready = next(e["ts"] for e in map(json.loads, (directory / "journal.jsonl").read_text().splitlines())
                 if e["kind"] == "transition" and e["to"] == "ready")
    launched = (directory / "steps" / "gateway.started.json").stat().st_mtime
    routed = (directory / "gateway.json").stat().st_mtime
    waited = " waiting for " in (directory / "logs" / "gateway.log").read_text().splitlines()[0]
    assert ("succeeded", True, True, True) == (attempt.outcome, launched < ready, routed >= ready - 0.01, waited)


def test_deployment_steps_launch_held_beside_the_preflight_and_their_servers_start_after_it(tmp_path,
                                                                                           fake_slurm) -> None:
    """With a preflight that takes 1 s: every deployment step (leader and follower) is launched
    while it runs, yet each server program starts (its launcher's release) only after the
    preflight passed, and the readiness deadline starts there too."""
    data = plan_data("two-deployments")
    data["client"]["preflight_argv"] += ["--sleep", "1"]
    attempt, staged = run(tmp_path, fake_slurm, data)
    directory = staged.attempt_dir
    moves = {(e["from"], e["to"]): e["ts"] for e in map(json.loads, (directory / "journal.jsonl").read_text().splitlines())
             if e["kind"] == "transition"}
    entered, passed = moves[("verified", "preflight")], moves[("preflight", "deploying")]
    launched = {p["name"]: p["started_at"] for p in read(directory, "processes.json")["processes"]
                if p["name"].startswith("deploy-")}
    released = {p.name.split(".")[0]: json.loads(p.read_text())["released_at"]
                for p in (directory / "steps").glob("deploy-*.started.json")}
    assert "succeeded" == attempt.outcome
    assert {"deploy-big-0", "deploy-big-0-1", "deploy-small-0"} == set(launched) == set(released)
    assert [] == [n for n, at in launched.items() if not entered <= at < passed - 0.5]
    assert [] == [n for n, at in released.items() if at < passed]


def test_the_node_probe_is_a_step_on_the_other_nodes_only(tmp_path, fake_slurm) -> None:
    """The supervisor's own node (the batch step holds the job's GPUs there) is probed from the
    supervisor, without an srun: a one-node attempt starts no probe step, and a three-node one
    starts one probe step on the two other nodes."""
    launched = {}
    for plan in ("single-node", "two-deployments"):
        attempt, staged = run(tmp_path / plan, fake_slurm, plan_data(plan))
        assert "succeeded" == attempt.outcome
        probes = [p["argv"] for p in read(staged.attempt_dir, "processes.json")["processes"] if p["name"] == "probe"]
        launched[plan] = [next(a for a in argv if a.startswith("--nodelist=")) for argv in probes]
    assert {"single-node": [], "two-deployments": ["--nodelist=127.0.2.2,127.0.2.3"]} == launched


def test_a_failed_preflight_withdraws_the_held_steps_and_no_server_ever_starts(tmp_path, fake_slurm) -> None:
    """The preflight exits 1: the attempt fails `preflight_failed`; the deployment steps launched held
    beside it end by end of input (exit 0, before cleanup had to stop them), no launcher wrote its
    record, the timeline shows no load, and nothing is left."""
    from dd_slurm.store.timeline import load

    data = plan_data("two-deployments")
    data["client"]["preflight_argv"] += ["--exit-code", "1"]
    attempt, staged = run(tmp_path, fake_slurm, data)
    directory = staged.attempt_dir
    held = {p["name"]: p["how"] for p in read(directory, "cleanup.json")["processes"] if p["name"].startswith("deploy-")}
    assert ("failed", "preflight_failed") == (attempt.outcome, attempt.reason)
    assert {name: "exited 0 before cleanup" for name in ("deploy-big-0", "deploy-big-0-1", "deploy-small-0")} == held
    assert ([], []) == (servers_started(directory), [r.name for r in load(directory).rows if r.name.endswith(" load")])
    assert [] == no_leftovers(staged.attempt_id)
