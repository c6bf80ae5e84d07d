"""Containers without a cluster: how a containerised step is run through srun (pyxis options, the
attempt's own dirs mounted at their paths, the image's python for the launcher), which images a
node cannot read, the image digest and its cache, and the leftover scan's enroot pass."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from dd_slurm.errors import VerificationError
from dd_slurm.plan.io import parse_plan
from dd_slurm.plan.placement import place_replicas
from dd_slurm.runtime import images
from dd_slurm.runtime.node.leftover_scan import enroot_leftovers
from dd_slurm.runtime.node.stepexec import missing_images
from dd_slurm.runtime.step_specs import Layout, client_step, replica_steps, srun_argv
from tests.runtime.harness import plan_data

LAYOUT = Layout("a-1", "/ws/attempts/a-1", "/ws/attempts/a-1/endpoints.json", "/ws/attempts/a-1/results",
                bundle_dir="/ws/bundles/b1")
IMAGE = {"image": "/images/vllm.sqsh", "mounts": ["/models:/models:ro"], "workdir": "/models"}


def containerised(deployment: dict | None, client: dict | None) -> dict:
    data = plan_data("single-node")
    data["deployments"][0]["container"] = deployment
    data["client"]["container"] = client
    return data


@pytest.mark.timeout(30)
def test_a_containerised_deployment_step_runs_through_pyxis_with_the_attempt_mounted_at_its_paths() -> None:
    """The server step's srun gets the image, the plan's mounts and the attempt, results and bundle
    dirs at the same paths, the workdir, --container-env with exactly the exported names, no home;
    the launcher runs with the image's /usr/bin/python3."""
    plan = parse_plan(json.dumps(containerised(IMAGE, None)).encode())
    placed = place_replicas(plan, ("n1",), 1)[0]
    (step,) = replica_steps(plan, plan.deployments[0], placed, LAYOUT, {})
    expected = ["/usr/bin/srun", "--jobid=7", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--overlap",
                f"--gres={'gpu:1' if plan.deployments[0].gpus_per_node else 'none'}", "--cpus-per-task=1",
                "--export=DD_SLURM_ATTEMPT_ID,DD_SLURM_ROLE", "--kill-on-bad-exit=1", "--job-name=deploy-small-0",
                "--container-image=/images/vllm.sqsh",
                "--container-mounts=/models:/models:ro,/ws/attempts/a-1:/ws/attempts/a-1,"
                "/ws/attempts/a-1/results:/ws/attempts/a-1/results,/ws/bundles/b1:/ws/bundles/b1",
                "--container-workdir=/models", "--container-env=DD_SLURM_ATTEMPT_ID,DD_SLURM_ROLE",
                "--no-container-mount-home", "/usr/bin/python3", "-I", "-S", "/b/entry.py", "_step", "/s.json"]
    assert expected == srun_argv(step, "/usr/bin/srun", "7", ["/opt/venv/bin/python", "-I", "-S"], "/b/entry.py",
                                 "/s.json")


@pytest.mark.timeout(30)
def test_a_containerised_client_works_in_the_attempt_dir_and_carries_its_key_by_name() -> None:
    """The client's image without a workdir works in the attempt dir; its key's name is exported and
    kept over the image's (--container-env), its value never in argv."""
    data = containerised(None, {"image": "/images/dd.sqsh"})
    data["client"]["env"]["api_key_var"] = "DD_KEY"
    plan = parse_plan(json.dumps(data).encode())
    step = client_step(plan, "n1", LAYOUT, {}, preflight=False)
    argv = srun_argv(step, "srun", "7", ["/usr/bin/python3"], "/b/entry.py", "/s.json")
    inside = [a for a in argv if a.startswith("--container")]
    assert ["--container-image=/images/dd.sqsh",
            "--container-mounts=/ws/attempts/a-1:/ws/attempts/a-1,/ws/attempts/a-1/results:/ws/attempts/a-1/results,"
            "/ws/bundles/b1:/ws/bundles/b1",
            "--container-workdir=/ws/attempts/a-1", "--container-env=DD_SLURM_ATTEMPT_ID,DD_SLURM_ROLE,DD_KEY"] == inside


@pytest.mark.timeout(30)
def test_a_step_without_a_container_has_no_pyxis_option() -> None:
    """Plans without containers run exactly as before (srun without pyxis refuses the options)."""
    plan = parse_plan(json.dumps(plan_data("single-node")).encode())
    (step,) = replica_steps(plan, plan.deployments[0], place_replicas(plan, ("n1",), 1)[0], LAYOUT, {})
    assert [] == [a for a in srun_argv(step, "srun", "7", ["/p"], "/e", "/s") if "container" in a]


@pytest.mark.timeout(30)
def test_the_node_probe_names_each_image_file_it_cannot_read(tmp_path) -> None:
    """A missing file, a directory and a FIFO (opened without blocking) are missing; a readable file
    and a registry reference (pyxis pulls it) are not."""
    good, fifo, folder = tmp_path / "ok.sqsh", tmp_path / "fifo.sqsh", tmp_path / "dir.sqsh"
    good.write_bytes(b"hsqs")
    os.mkfifo(fifo)
    folder.mkdir()
    found = missing_images([str(good), str(tmp_path / "gone.sqsh"), str(folder), str(fifo), "nvcr.io#nvidia/vllm:1"])
    assert [f"{tmp_path / 'gone.sqsh'}: No such file or directory", f"{folder} is not a regular file",
            f"{fifo} is not a regular file"] == found


@pytest.mark.timeout(30)
def test_an_image_digest_is_held_to_the_plan_and_a_wrong_one_fails_image_digest(tmp_path) -> None:
    """The right sha256 passes and is recorded per use; a wrong one is image_digest naming both; a
    missing file is image_missing."""
    image = tmp_path / "img.sqsh"
    image.write_bytes(b"squash" * 1000)
    right = hashlib.sha256(image.read_bytes()).hexdigest()
    cache = tmp_path / "ws" / "cache" / "digests.json"
    plan = parse_plan(json.dumps(containerised({"image": str(image), "image_sha256": right}, None)).encode())
    assert {"deployments.small": {"image": str(image), "sha256": right}} == images.check_images(plan, cache)
    wrong = parse_plan(json.dumps(containerised({"image": str(image), "image_sha256": "0" * 64}, None)).encode())
    with pytest.raises(VerificationError) as err:
        images.check_images(wrong, cache)
    assert ("image_digest", f"deployments.small.container.image {image} has sha256 {right}, the plan says "
            f"{'0' * 64}") == (err.value.reason, err.value.detail)
    image.unlink()
    with pytest.raises(VerificationError) as gone:
        images.check_images(wrong, cache)
    assert ("image_missing", f"deployments.small.container.image {image}: No such file or directory") == \
        (gone.value.reason, gone.value.detail)


@pytest.mark.timeout(30)
def test_an_image_is_hashed_once_until_the_file_changes(tmp_path) -> None:
    """The second look reads the cache (a planted digest for the same file is what comes back); a
    file written again (new mtime) is hashed again."""
    image, cache = tmp_path / "img.sqsh", tmp_path / "cache.json"
    image.write_bytes(b"a" * 4096)
    first = images.image_sha256(str(image), cache)
    key = images.file_key(str(image), os.stat(image))
    cache.write_text(json.dumps({key: "f" * 64}))
    assert (hashlib.sha256(b"a" * 4096).hexdigest(), "f" * 64) == (first, images.image_sha256(str(image), cache))
    image.write_bytes(b"b" * 4096)
    os.utime(image, ns=(1, 1))
    assert hashlib.sha256(b"b" * 4096).hexdigest() == images.image_sha256(str(image), cache)


@pytest.mark.timeout(30)
def test_a_cache_read_back_from_disk_keeps_only_well_formed_digests(tmp_path) -> None:
    """Values read back from disk are validated: a non-digest or a non-string is dropped."""
    cache = tmp_path / "cache.json"
    cache.write_text(json.dumps({"a": "0" * 64, "b": "nothex", "c": 3}))
    assert {"a": "0" * 64} == images.read_cache(cache)
    cache.write_text("[1, 2]")
    assert {} == images.read_cache(cache)


@pytest.mark.timeout(30)
def test_the_leftover_scan_removes_this_jobs_enroot_containers_only(tmp_path) -> None:
    """`enroot list` names containers of several jobs; only pyxis_<job>.<step> and pyxis_<job>_<name>
    of this job are removed."""
    log = tmp_path / "removed"
    fake = tmp_path / "enroot"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = list ]; then printf 'pyxis_12.3\\npyxis_12_x.4\\npyxis_123.1\\nmine\\n';"
                    f" else echo \"$3\" >>{log}; fi\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    answer = enroot_leftovers("12", True, path=str(tmp_path))
    assert ({"method": "ran", "containers_found": ["pyxis_12.3", "pyxis_12_x.4"],
             "containers_removed": ["pyxis_12.3", "pyxis_12_x.4"]}, ["pyxis_12.3", "pyxis_12_x.4"]) == \
        (answer, log.read_text().split())
    assert {"method": "unavailable: no enroot on this node"} == enroot_leftovers("12", True, path=str(tmp_path / "no"))
