"""Replicas, automatic ports, listener identity, served model, the attempt key and secrets off disk:
whole attempts on fake Slurm (the fake nodes are loopback addresses of this machine)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dd_slurm.machine.journal import current_state, read_journal
from tests.conftest import ROOT
from tests.runtime.harness import no_leftovers, outcome, plan_data, read, run

FAKE_MODEL = ROOT / "dd_slurm" / "testing" / "fake_model.py"

AUTH_CLIENT = ROOT / "tests" / "runtime" / "auth_client.py"


def auth_client(data: dict) -> dict:
    data["client"].update(argv=["/usr/bin/python3", str(AUTH_CLIENT), "{endpoints_file}", "{results_dir}/auth.json"],
                          preflight_argv=None, result={"path": "auth.json", "format": "json", "min_records": 1})
    data["client"]["env"].update(forward=["HF_TOKEN"])
    return data


def files_containing(roots: list[Path], needle: bytes) -> list[str]:
    return sorted(str(p) for root in roots for p in root.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_three_replicas_with_automatic_ports_and_keys(tmp_path, fake_slurm) -> None:
    """The replicas plan: three replicas of one alias, each on its own GPU slot and a port its
    launcher chose; endpoints.json (schema 2) lists them under one url, the gateway's; every replica ready after
    its identity and served-model checks; the client, given the key, succeeds."""
    attempt, staged = run(tmp_path, fake_slurm, plan_data("replicas"), nodes=("127.0.2.1", "127.0.2.2"))
    assert ("succeeded", "ok") == (attempt.outcome, attempt.reason)
    steps = staged.attempt_dir / "steps"
    started = {k: json.loads((steps / f"deploy-small-{k}.started.json").read_text()) for k in range(3)}
    assert [("127.0.2.1", "0"), ("127.0.2.1", "1"), ("127.0.2.2", "0")] == \
        [(started[k]["node"], started[k]["cuda_visible_devices"]) for k in range(3)]
    urls = [f"http://{started[k]['node']}:{started[k]['port']}/v1" for k in range(3)]
    assert 3 == len({started[k]["port"] for k in range(3)})
    endpoints = read(staged.attempt_dir, "endpoints.json")
    gateway = read(staged.attempt_dir, "gateway-state.json")
    assert {"small-model": {"url": f"http://127.0.0.1:{gateway['port']}/small-model/v1", "replicas": [
        {"deployment": "small", "replica": k, "base_url": urls[k], "state": "serving"} for k in range(3)]}} == endpoints["models"]
    readiness = read(staged.attempt_dir, "readiness.json")["deployments"]
    assert {f"small-{k}": ("stopped", started[k]["port"], [urls[k]]) for k in range(3)} == \
        {name: (r["state"], r["port"], r["ready"]) for name, r in readiness.items()}
    assert [] == no_leftovers(staged.attempt_id)


def test_key_and_forwarded_secret_reach_only_environments(tmp_path, fake_slurm) -> None:
    """Servers require the attempt key (401 without it or with a wrong one); the client gets it
    and a forwarded HF_TOKEN through its environment; neither value is in any file of the
    workspace (spec files hold names), nor in processes.json's argv."""
    marker = "hf-marker-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    attempt, staged = run(tmp_path, fake_slurm, auth_client(plan_data("replicas")), nodes=("127.0.2.1", "127.0.2.2"),
                          HF_TOKEN=marker)
    key = attempt.actions.session.api_key
    auth = read(staged.attempt_dir, "results/auth.json")
    assert ("succeeded", 401, 401, 200) == (attempt.outcome, auth["without"], auth["wrong"], auth["mine"])
    assert (hashlib.sha256(key.encode()).hexdigest(), hashlib.sha256(marker.encode()).hexdigest()) == \
        (auth["key"], auth["hf"])
    workspace = staged.attempt_dir.parent.parent
    assert ([], []) == (files_containing([workspace], marker.encode()), files_containing([workspace], key.encode()))
    spec = read(staged.attempt_dir, "steps/client.json")
    assert ["HF_TOKEN", "OPENAI_API_KEY"] == spec["pass"]


def _start_foreign_at(attempt_root: Path, state: str, argv: list[str], started: list) -> threading.Thread:
    """Start `argv` (a process of nobody's attempt) once the attempt's journal shows `state`."""
    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            journals = list(attempt_root.glob("ws/attempts/*/journal.jsonl"))
            if journals and current_state(read_journal(journals[0]), "staged") == state:
                started.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(120)
def test_a_foreign_listener_on_the_port_is_server_identity_and_is_left_alone(tmp_path, fake_slurm) -> None:
    """Another process starts serving (200 on /health) on the deployment's port once the attempt
    is deploying, before its own slow-loading server binds: server_identity naming the port and
    node, and the foreign process is still running afterwards."""
    data = plan_data("single-node")
    data["deployments"][0]["argv"][data["deployments"][0]["argv"].index("--load-time") + 1] = "6"
    port = data["deployments"][0]["port"]
    foreign: list[subprocess.Popen] = []
    watcher = _start_foreign_at(tmp_path, "deploying", [sys.executable, str(FAKE_MODEL), "--host", "127.0.2.1",
                                                         "--port", str(port), "--model", "small-model"], foreign)
    try:
        attempt, staged = run(tmp_path, fake_slurm, data)
        watcher.join(5)
        assert ("failed", "server_identity") == (attempt.outcome, attempt.reason)
        assert f"small-0: port {port} on 127.0.2.1: the listener on 127.0.2.1:{port} belongs to pid " \
               f"{foreign[0].pid}, not to the step's processes" == attempt.detail
        assert foreign[0].poll() is None
        assert [] == no_leftovers(staged.attempt_id)
    finally:
        for proc in foreign:
            proc.kill()
            proc.wait()


def test_served_model_missing_from_v1_models_is_server_identity(tmp_path, fake_slurm) -> None:
    """served_model names a model the server does not list: server_identity, before the client."""
    data = plan_data("single-node")
    data["deployments"][0]["served_model"] = "another-model"
    attempt, staged = run(tmp_path, fake_slurm, data)
    assert ("failed", "server_identity") == outcome(staged.attempt_dir)
    assert attempt.detail.endswith("/v1/models does not list 'another-model' (it lists small-model)")
    assert not (staged.attempt_dir / "steps" / "client.json").exists()


@pytest.mark.parametrize("where", ["attempt_dir", "plan_path", "forwarded_path"])
def test_probe_checks_the_expanded_program_on_the_steps_own_path(tmp_path, fake_slurm, where) -> None:
    """argv[0] `{attempt_dir}/bin/python3`, or a bare name found only on the PATH the plan sets
    or forwards, passes the pre-launch probe and runs; a missing one is executable_missing naming it."""
    data = plan_data("single-node")
    bin_dir = tmp_path / "plan-bin"
    bin_dir.mkdir()
    (bin_dir / "my-python").symlink_to("/usr/bin/python3")
    extra = {}
    if where == "attempt_dir":
        data["client"]["argv"][0] = "{attempt_dir}/bin/python3"
    else:
        data["client"]["argv"][0] = "my-python"
    if where == "plan_path":
        data["client"]["env"]["set"]["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    if where == "forwarded_path":
        data["client"]["env"]["forward"] = ["PATH"]
        extra["PATH"] = f"{bin_dir}:/usr/bin:/bin"

    def link_python(staged) -> None:
        (staged.attempt_dir / "bin").mkdir()
        (staged.attempt_dir / "bin" / "python3").symlink_to("/usr/bin/python3")

    attempt, _staged = run(tmp_path, fake_slurm, data, before_run=link_python, **extra)
    assert ("succeeded", "ok") == (attempt.outcome, attempt.reason)
    (bin_dir / "my-python").unlink()
    missing, staged = run(tmp_path / "again", fake_slurm, data, **extra)
    program = f"{staged.attempt_dir}/bin/python3" if where == "attempt_dir" else "my-python"
    assert ("executable_missing", f"{program} not found on 127.0.2.1") == (missing.reason, missing.detail)


def test_followers_of_an_automatic_port_replica_get_the_leaders_port(tmp_path, fake_slurm) -> None:
    """A two-node deployment with port null: its leader chooses the port on its node; the follower
    starts once that port is published and sees it as {port}; the attempt succeeds."""
    data = plan_data("two-deployments")
    data["deployments"][0]["port"] = None
    data["deployments"][0]["follower_argv"] += ["--port", "{port}"]
    attempt, staged = run(tmp_path, fake_slurm, data)
    assert ("succeeded", "ok") == (attempt.outcome, attempt.reason)
    steps = staged.attempt_dir / "steps"
    leader = json.loads((steps / "deploy-big-0.started.json").read_text())
    follower = json.loads((steps / "deploy-big-0-1.json").read_text())
    assert (True, str(leader["port"])) == (leader["port"] >= 1024, follower["values"]["port"])
    assert follower["argv"][-2:] == ["--port", "{port}"]
    assert [] == no_leftovers(staged.attempt_id)
