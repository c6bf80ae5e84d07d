"""The README's first plan, the one users copy, is a valid plan, sized for a vLLM job."""

from __future__ import annotations

import json
import re

from dd_slurm.plan.io import parse_plan
from tests.conftest import ROOT


def readme_json_blocks() -> list[str]:
    return re.findall(r"```json\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def first_plan_on_the_lab() -> dict:
    """The first plan with the one edit the README names for the lab: the deployment's argv."""
    plan, lab_argv = (json.loads(block) for block in readme_json_blocks()[:2])
    plan["deployments"][0]["argv"] = lab_argv
    return plan


def containerised_first_plan_on_the_lab(image: str) -> dict:
    """The README's first plan with vLLM in an image, with the lab edits the README names: the lab
    image, no mounts, the fake server's argv, ENROOT_ALLOW_SUPERUSER forwarded."""
    plan = next(json.loads(b) for b in readme_json_blocks() if b.startswith("{") and '"container"' in b)
    deployment = plan["deployments"][0]
    deployment["container"].update(image=image, mounts=[])
    deployment["argv"] = json.loads(readme_json_blocks()[1])
    deployment["env"]["forward"] = ["ENROOT_ALLOW_SUPERUSER"]
    return plan


def test_the_containerised_first_plan_validates_and_differs_from_the_first_only_in_its_deployment() -> None:
    """The Containers section's first.json is a valid plan whose client and job are the first
    plan's: only the deployment (its image, mounts and the server's argv) differs."""
    first = json.loads(readme_json_blocks()[0])
    boxed = next(json.loads(b) for b in readme_json_blocks() if b.startswith("{") and '"container"' in b)
    plan = parse_plan(json.dumps(boxed))
    assert ((first["job"], first["client"]), "/shared/images/vllm-openai.sqsh", "vllm") == (
        (boxed["job"], boxed["client"]), plan.deployments[0].container.image, plan.deployments[0].argv[0])
    parse_plan(json.dumps(containerised_first_plan_on_the_lab("/images/lab.sqsh")))


def test_the_first_plan_in_the_readme_validates_and_sets_what_a_vllm_job_needs() -> None:
    """The first ```json block parses as a plan of at most 10 lines that sets CPUs, memory, the
    pre-timeout signal and a port dd-slurm picks; the second is the argv the lab edit puts in."""
    block = readme_json_blocks()[0]
    plan = parse_plan(block)
    assert ("first-run", True, (2, "3G", 120), None) == (
        plan.name, len(block.splitlines()) <= 10, (plan.job.cpus_per_task, plan.job.mem, plan.job.pre_timeout_signal_s),
        plan.deployments[0].port)
    assert "fake_model.py" in parse_plan(json.dumps(first_plan_on_the_lab())).deployments[0].argv[1]
