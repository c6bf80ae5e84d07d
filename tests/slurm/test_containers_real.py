"""Containers on the real cluster, through the real pyxis SPANK plugin and enroot that the lab builds
for each Slurm release (fixtures/cluster/containers.sh): servers, followers and the client run in
the lab's squashfs image; a missing image and a wrong digest fail before any server starts; a
cancel leaves no process, no enroot container and no mount behind."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from dd_slurm.runtime.node.weights import copy_path
from tests.runtime.harness import evidence, no_leftovers, outcome, plan_data, read, servers_started
from tests.slurm.clusters import table
from tests.slurm.conftest import wait_until
from tests.slurm.real_attempt import EXE, submit, wait_job_gone, wait_state

LAB = Path(os.environ.get("DD_SLURM_LAB_DIR", "/var/lib/dd-slurm-lab"))
IMAGE = LAB / "images" / "lab-python.sqsh"  # built by `clusters.sh up` (make test)
MARK = "/etc/dd-slurm-image"  # a file only the image has


def image_sha256() -> str:
    return hashlib.sha256(IMAGE.read_bytes()).hexdigest()


def in_image(data: dict, digest: str | None = None) -> dict:
    """Every deployment (leaders and followers) and the client run in the lab image. The lab's jobs
    run as root, and pyxis runs root's containers only when the task's environment says
    ENROOT_ALLOW_SUPERUSER (else it joins a user namespace enroot never made): forwarded by name."""
    container = {"image": str(IMAGE), "image_sha256": digest, "mounts": [], "workdir": None}
    for where in [*data["deployments"], data["client"]]:
        where["container"] = container
        where.setdefault("env", {}).setdefault("forward", []).append("ENROOT_ALLOW_SUPERUSER")
    return data


def submit_as_root(tmp_path: Path, data: dict, name: str, cluster) -> tuple[Path, str]:
    return submit(tmp_path, data, name, cluster.env({**os.environ, "ENROOT_ALLOW_SUPERUSER": "yes"}))


def root_of(cluster) -> str:
    """Where the cluster's slurmd runs: this machine, or its Debian root."""
    suite = table()[cluster.version]["root"]
    return "/" if suite == "host" else str(LAB / "roots" / suite)


def enroot_containers(cluster, job_id: str) -> list[str]:
    """This job's enroot containers where the cluster's slurmd runs."""
    argv = ["env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "/usr/sbin/chroot", root_of(cluster), "enroot", "list"]
    listed = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert 0 == listed.returncode, listed.stderr
    return [n for n in listed.stdout.split() if n.startswith((f"pyxis_{job_id}.", f"pyxis_{job_id}_"))]


def container_mounts(job_id: str) -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f"pyxis_{job_id}" in line]


def in_container(pid: int) -> bool:
    """The process sees the image's root file system (the mark), so it runs inside the container."""
    try:
        return Path(f"/proc/{pid}/root{MARK}").read_text().startswith("dd-slurm lab image")
    except OSError:
        return False


@pytest.fixture(autouse=True)
def lab_image():
    assert IMAGE.is_file(), f"{IMAGE} is missing: `make cluster-up` builds it (fixtures/cluster/containers.sh image)"


@pytest.mark.timeout(300)
def test_two_deployments_and_the_client_run_in_the_image(tmp_path, cluster) -> None:
    """A two-node deployment (leader and follower), a one-node one and the client, all in the
    image (one with its image_sha256): each runs inside its container while the client runs and
    sees its replica's GPU slots in CUDA_VISIBLE_DEVICES, the
    attempt succeeds through the logical endpoints with the records validated, the result
    manifest and `inspect` name the image and its digest, and no enroot container is left."""
    digest = image_sha256()
    data = in_image(plan_data("two-deployments"))
    data["deployments"][0]["container"] = dict(data["deployments"][0]["container"], image_sha256=digest)
    data["client"]["argv"] += ["--sleep", "4"]
    attempt_dir, job_id = submit_as_root(tmp_path, data, "in-image", cluster)
    wait_state(attempt_dir, ("client", "done"), 200)
    wait_until(lambda: (attempt_dir / "steps" / "client.started.json").exists(), 30, "the client's launcher record")
    steps = sorted(p.name.removesuffix(".started.json") for p in (attempt_dir / "steps").glob("*.started.json")
                   if p.name.startswith(("deploy-", "client")))
    records = {s: read(attempt_dir, f"steps/{s}.started.json") for s in steps}
    inside = {s: in_container(record["pid"]) for s, record in records.items()}
    wait_state(attempt_dir, ("done",), 200)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), evidence(attempt_dir)
    assert {s: True for s in ["client", "deploy-big-0", "deploy-big-0-1", "deploy-small-0"]} == inside
    gpus = {s: len(r["cuda_visible_devices"].split(",")) for s, r in records.items() if s.startswith("deploy-")}
    assert {"deploy-big-0": 2, "deploy-big-0-1": 2, "deploy-small-0": 1} == gpus  # the replica's slots, inside too
    used = {"image": str(IMAGE), "sha256": digest}
    manifest = read(attempt_dir, "result-manifest.json")
    assert ({"deployments.big": used, "deployments.small": used, "client": used}, 6) == \
        (manifest["images"], manifest["records"])
    shown = subprocess.run(EXE + ["inspect", str(attempt_dir)], capture_output=True, text=True, timeout=60)
    assert f"image {IMAGE} sha256 {digest}" in shown.stdout, shown.stdout
    assert ([], [], []) == (enroot_containers(cluster, job_id), container_mounts(job_id), no_leftovers(attempt_dir.name))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["missing", "digest"])
def test_a_missing_image_or_a_wrong_digest_fails_before_any_server_starts(tmp_path, cluster, fault) -> None:
    """An image path that does not exist fails image_missing; the real image with another digest
    fails image_digest; no server was released in either case."""
    if fault == "missing":
        data, reason = in_image(plan_data("single-node")), "image_missing"
        for where in [*data["deployments"], data["client"]]:
            where["container"] = dict(where["container"], image=str(tmp_path / "no-such-image.sqsh"))
    else:
        data, reason = in_image(plan_data("single-node"), "0" * 64), "image_digest"
    attempt_dir, job_id = submit_as_root(tmp_path, data, f"image-{fault}", cluster)
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    assert (("failed", reason), []) == (outcome(attempt_dir), servers_started(attempt_dir)), evidence(attempt_dir)


@pytest.mark.timeout(300)
def test_a_cancel_mid_run_leaves_no_process_container_or_mount(tmp_path, cluster) -> None:
    """`dd-slurm cancel` while the containerised client runs: the attempt ends cancelled, and no
    process of the attempt, no enroot container of the job and no mount of one is left."""
    data = in_image(plan_data("replicas"))
    data["client"]["argv"] += ["--sleep", "60"]
    data["client"]["timeout_s"] = None
    attempt_dir, job_id = submit_as_root(tmp_path, data, "image-cancel", cluster)
    wait_state(attempt_dir, ("client",), 200)
    assert enroot_containers(cluster, job_id), "the running attempt has no enroot container"
    out = subprocess.run(EXE + ["cancel", str(attempt_dir)], capture_output=True, text=True, timeout=60,
                         env=cluster.env())
    assert 0 == out.returncode, out.stderr
    wait_state(attempt_dir, ("done",), 120)
    wait_job_gone(job_id, 120)
    cleanup = read(attempt_dir, "cleanup.json")
    assert (("cancelled", "sigterm"), "clean") == (outcome(attempt_dir), cleanup["verdict"]), evidence(attempt_dir)
    assert ([], [], []) == (enroot_containers(cluster, job_id), container_mounts(job_id), no_leftovers(attempt_dir.name))
    assert json.loads(json.dumps(cleanup["problems"])) == []


STARTER = """import os, signal, sys
# Like apptainer's starter: the program runs as a child of a process that stays, passes signals on
# and exits with the child's status.
child = os.fork()
if child == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
for signo in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signo, lambda s, _f: os.kill(child, s))
_, status = os.waitpid(child, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.timeout(240)
def test_a_server_under_a_starter_process_is_ours_and_cleaned_up(tmp_path, cluster) -> None:
    """The Apptainer shape without a `container` key: argv starts a starter that runs the server as
    its child. The child's listener is proven ours (it is in the step's process tree), the attempt
    succeeds, and nothing of the starter or the server is left."""
    starter = tmp_path / "starter.py"
    starter.write_text(STARTER)
    data = plan_data("single-node")
    argv = data["deployments"][0]["argv"]
    data["deployments"][0]["argv"] = [argv[0], str(starter), *argv[1:]]
    attempt_dir, job_id = submit(tmp_path, data, "starter")
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), evidence(attempt_dir)
    assert ([], "clean") == (no_leftovers(attempt_dir.name), read(attempt_dir, "cleanup.json")["verdict"])


@pytest.mark.timeout(300)
def test_staged_weights_are_mounted_read_only_into_the_image(tmp_path, cluster) -> None:
    """3 replicas in the image, weights staged node-local: each server (inside its container) reads
    `{weights}`, its node's copy, which pyxis mounts at the same path once the staging step has
    made it (those steps start at release, not held); the copy cannot be written from inside."""
    source = tmp_path / "model"
    (source / "tok").mkdir(parents=True)
    (source / "model.safetensors").write_bytes(os.urandom(1 << 20))
    (source / "tok" / "tokenizer.json").write_text("{}")
    data = in_image(plan_data("replicas"))
    dep = data["deployments"][0]
    dep["weights"] = {"path": str(source), "stage": "node_local", "local_dir": str(tmp_path / "local" / "{node}")}
    dep["argv"] += ["--weights", "{weights}"]
    locks = []
    for node in ("n1", "n2", "n3"):  # staging waits 5 s (as behind a slow copy) while the other steps start
        target = copy_path(str(source), str(tmp_path / "local" / "{node}"), node, None, os.getuid())
        Path(target).parent.mkdir(parents=True, mode=0o700)
        locks.append(os.open(f"{target}.lock", os.O_WRONLY | os.O_CREAT, 0o600))
        fcntl.flock(locks[-1], fcntl.LOCK_EX)
    try:
        attempt_dir, job_id = submit_as_root(tmp_path, data, "in-image-weights", cluster)
        wait_until(lambda: (attempt_dir / "logs" / "stage-weights.log").exists(), 120, "the staging step")
        time.sleep(5)
    finally:
        for lock in locks:
            os.close(lock)
    wait_state(attempt_dir, ("done",), 250)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), evidence(attempt_dir)
    staged = {json.loads(line)["copy"] for line in (attempt_dir / "journal.jsonl").read_text().splitlines()
              if '"weights_staged"' in line}
    said = [line.split("]: weights ", 1)[1] for p in (attempt_dir / "logs").glob("deploy-*.log")
            for line in p.read_text().splitlines() if "]: weights " in line]
    loaded = {line.split(": ", 1)[0] for line in said}
    assert (3, staged, [True] * 3) == (len(said), loaded, [line.endswith(", read-only") for line in said]), said
