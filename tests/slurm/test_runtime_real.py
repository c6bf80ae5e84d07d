"""The allocation runtime on the real cluster: end-to-end plans, and verification failures."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.scheduler.render import interpreter
from tests.runtime.harness import (
    failure_path,
    journal,
    no_leftovers,
    outcome,
    plan_data,
    read,
    servers_started,
    three_single_node_deployments,
)
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state


@pytest.mark.timeout(180)
@pytest.mark.parametrize("plan", ["single-node", "two-deployments", "replicas"])
def test_plan_succeeds_on_the_real_cluster(tmp_path, plan: str) -> None:
    """The one-node plan, the plan with a deployment across n1+n2 (leader + follower) and one on
    n3, and three replicas of one alias with automatic ports and the attempt key, end `succeeded`
    with results validated, a clean cleanup and no process left anywhere."""
    attempt_dir, job_id = submit(tmp_path, plan_data(plan), f"e2e-{plan}")
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir)
    manifest = read(attempt_dir, "result-manifest.json")
    assert manifest["records"] >= 3
    assert "clean" == read(attempt_dir, "cleanup.json")["verdict"]
    if plan == "two-deployments":
        nodes = {json.loads(p.read_text())["node"] for p in (attempt_dir / "steps").glob("deploy-*.started.json")}
        assert {"n1", "n2", "n3"} == nodes
    if plan == "replicas":
        replicas = read(attempt_dir, "endpoints.json")["models"]["small-model"]["replicas"]
        assert [0, 1, 2] == [r["replica"] for r in replicas] and 3 == len({r["base_url"] for r in replicas})
    assert [] == no_leftovers(attempt_dir.name)


def _fails_verification(attempt_dir, job_id, reason, probed: bool = False) -> None:
    wait_state(attempt_dir, ("done",), 120)
    wait_job_gone(job_id)
    assert failure_path(reason, probed) == journal(attempt_dir)
    assert [] == servers_started(attempt_dir)


@pytest.mark.timeout(180)
def test_tampered_bundle_file(tmp_path, cluster) -> None:
    """A bundle file changed after staging: bundle_checksum, before any server."""
    from dd_slurm.bundle.stage import stage
    from dd_slurm.clock import Clock
    from dd_slurm.plan.io import parse_plan

    staged = stage(parse_plan(json.dumps(plan_data("single-node"))), tmp_path / "ws", Clock())
    target = staged.bundle_dir / "lib" / "dd_slurm" / "plan" / "fields.py"
    os.chmod(target, 0o644)
    target.write_text(target.read_text() + "# tampered\n")
    job = subprocess.run([cluster.tool("sbatch"), "--parsable", str(staged.script)], capture_output=True, text=True,
                         check=True)
    _fails_verification(staged.attempt_dir, job.stdout.strip(), "bundle_checksum")


@pytest.mark.timeout(180)
def test_tampered_plan(tmp_path, cluster) -> None:
    """plan.json changed after staging: plan_digest, before any server."""
    from dd_slurm.bundle.stage import stage
    from dd_slurm.clock import Clock
    from dd_slurm.plan.io import parse_plan

    staged = stage(parse_plan(json.dumps(plan_data("single-node"))), tmp_path / "ws", Clock())
    plan_file = staged.attempt_dir / "plan.json"
    os.chmod(plan_file, 0o600)
    plan_file.write_bytes(plan_file.read_bytes().replace(b'"min_records":3', b'"min_records":0'))
    job = subprocess.run([cluster.tool("sbatch"), "--parsable", str(staged.script)], capture_output=True, text=True,
                         check=True)
    _fails_verification(staged.attempt_dir, job.stdout.strip(), "plan_digest")


@pytest.mark.timeout(180)
def test_plan_needing_8_gpus_per_node_on_4_gpu_nodes(tmp_path, cluster) -> None:
    """The plan wants 8 GPUs per node; the allocation (sbatch --gres=gpu:4 overriding the script)
    has 4: gpu_shape, before any server."""
    from dd_slurm.bundle.stage import stage
    from dd_slurm.clock import Clock
    from dd_slurm.plan.io import parse_plan

    data = plan_data("single-node")
    data["job"]["gpus_per_node"] = 8
    staged = stage(parse_plan(json.dumps(data)), tmp_path / "ws", Clock())
    job = subprocess.run([cluster.tool("sbatch"), "--parsable", "--gres=gpu:4", str(staged.script)],
                         capture_output=True, text=True, check=True)
    _fails_verification(staged.attempt_dir, job.stdout.strip(), "gpu_shape")


@pytest.mark.timeout(180)
def test_busy_port_on_n2(tmp_path, cluster) -> None:
    """A port taken on n2 (its own address) before the job: port_busy from the probe on n2."""
    data = three_single_node_deployments(plan_data("single-node"))
    port = data["deployments"][1]["port"]
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind((cluster.addr("n2"), port))
        busy.listen()
        attempt_dir, job_id = submit(tmp_path, data, "busy-port")
        _fails_verification(attempt_dir, job_id, "port_busy", probed=True)
    detail = next(e["detail"] for e in map(json.loads, (attempt_dir / "journal.jsonl").read_text().splitlines())
                  if e.get("reason") == "port_busy")
    assert f"port {port} is already in use on n2" == detail


@pytest.mark.timeout(180)
def test_unwritable_results_dir(tmp_path, cluster) -> None:
    """The results dir handed to someone else after staging: paths, before any server."""
    from dd_slurm.bundle.stage import stage
    from dd_slurm.clock import Clock
    from dd_slurm.plan.io import parse_plan

    staged = stage(parse_plan(json.dumps(plan_data("single-node"))), tmp_path / "ws", Clock())
    os.chown(staged.attempt_dir / "results", 65534, 65534)
    job = subprocess.run([cluster.tool("sbatch"), "--parsable", str(staged.script)], capture_output=True, text=True,
                         check=True)
    _fails_verification(staged.attempt_dir, job.stdout.strip(), "paths")


@pytest.mark.timeout(180)
def test_a_second_supervisor_is_refused_on_the_real_cluster(tmp_path, cluster) -> None:
    """While the job's supervisor runs the client: `advance` on the login node refuses (not in an
    allocation), and `advance` inside the job's allocation (an srun step on the batch node)
    refuses naming the holder, both exit 2 with one line; the attempt still ends succeeded."""
    from tests.faults.matrix import SLOW_CLIENT
    from tests.slurm.real_attempt import EXE

    data = plan_data("single-node")
    SLOW_CLIENT(data)
    attempt_dir, job_id = submit(tmp_path, data, "second-supervisor")
    wait_state(attempt_dir, ("client",), 150)
    outside = subprocess.run(EXE + ["advance", str(attempt_dir)], capture_output=True, text=True, timeout=60,
                             env={k: v for k, v in cluster.env().items() if not k.startswith("SLURM_")})
    record = json.loads((attempt_dir / "attempt.json").read_text())
    inner = [*interpreter(data["runtime"]["python"], entry_sha256(), record["bundle_digest"]),
             f"{record['bundle_dir']}/entry.py", "advance", str(attempt_dir), "--bundle-digest",
             record["bundle_digest"], "--plan-digest", record["plan_digest"]]  # as the job runs it, in its own root
    inside = subprocess.run([cluster.tool("srun"), f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1",
                             "--gres=none", *inner], capture_output=True, text=True, timeout=60, env=cluster.env())
    assert (2, 1) == (outside.returncode, len(outside.stderr.splitlines())), outside.stderr
    assert "not inside a Slurm allocation" in outside.stderr
    assert 2 == inside.returncode and "already supervised by `run` pid" in inside.stderr, inside.stderr
    assert f"(job {job_id} step batch" in inside.stderr
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir)


@pytest.mark.timeout(180)
def test_an_escaped_daemon_is_found_and_killed_on_the_real_cluster(tmp_path, cluster) -> None:
    """A server double-forks `setsid env -i sleep 1000`. The launcher made the server a child
    subreaper, so the daemon stays in the step's process tree: it is recorded there before the
    stop, and dies with its step (Slurm's proctrack signals the tree or the cgroup) or by the scan;
    nothing is left. The scan's cgroup method ran exactly where Slurm gives steps cgroups."""
    from tests.runtime.test_cleanup_budget import ESCAPING_SERVER, WRITE_THREE, _alive

    data = plan_data("single-node")
    data["deployments"][0]["argv"] = ESCAPING_SERVER
    data["client"].update(argv=WRITE_THREE, preflight_argv=None)
    attempt_dir, job_id = submit(tmp_path, data, "escaped-daemon")
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    pid = int((attempt_dir / "escaped.pid").read_text())
    try:
        report = read(attempt_dir, "cleanup.json")
        node = read(attempt_dir, "steps/deploy-small-0.started.json")["node"]  # whichever node Slurm gave
        recorded = [p["pid"] for p in read(attempt_dir, f"steps/tree-{node}.json")["tree"]]
        found = {p["pid"]: p for p in report["leftovers_found"]}
        assert (("succeeded", "ok"), False, True) == (outcome(attempt_dir), _alive(pid), pid in recorded)
        assert pid not in found or "process_tree" in found[pid]["seen_by"]
        assert ("clean", "ran") == (report["verdict"], report["methods"][node]["process_tree"])
        cgroup = report["methods"][node]["cgroup"].split(":")[0]
        assert ("ran" if cluster.proctrack == "cgroup" else "unavailable") == cgroup, report["methods"][node]
    finally:
        if _alive(pid):
            os.kill(pid, 9)
