"""The README's first plan runs on the lab after the one edit the README names (the fake server's
argv for vLLM's), with the real Data Designer client."""

from __future__ import annotations

import json

import pytest

from tests.runtime.harness import outcome
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state
from tests.test_readme import first_plan_on_the_lab


@pytest.mark.timeout(300)
def test_the_readme_s_first_plan_runs_on_the_lab_after_its_one_edit(tmp_path) -> None:
    """Submitted as the README shows it, with only the deployment's argv replaced: the attempt
    succeeds and the client wrote the 12 records the plan asks for, one text column for `qwen`."""
    attempt_dir, job_id = submit(tmp_path, first_plan_on_the_lab(), "first")
    wait_state(attempt_dir, ("done",), 240)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), (attempt_dir / "logs" / "client.log").read_text()[-2000:]
    records = [json.loads(line) for line in (attempt_dir / "results" / "records.jsonl").read_text().splitlines()]
    assert (12, True) == (len(records), records[0]["text_qwen"].startswith("[qwen] reply"))


@pytest.mark.timeout(300)
def test_the_readme_s_containerised_first_plan_runs_on_the_lab_after_its_edits(tmp_path, cluster) -> None:
    """The Containers section's first.json with the lab edits it names: the fake server runs in the
    lab image through pyxis, the real Data Designer client outside it; 12 records for `qwen`."""
    import os

    from tests.slurm.test_containers_real import IMAGE
    from tests.test_readme import containerised_first_plan_on_the_lab

    env = cluster.env({**os.environ, "ENROOT_ALLOW_SUPERUSER": "yes"})
    attempt_dir, job_id = submit(tmp_path, containerised_first_plan_on_the_lab(str(IMAGE)), "first-in-image", env)
    wait_state(attempt_dir, ("done",), 240)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), (attempt_dir / "logs" / "client.log").read_text()[-2000:]
    records = [json.loads(line) for line in (attempt_dir / "results" / "records.jsonl").read_text().splitlines()]
    manifest = json.loads((attempt_dir / "result-manifest.json").read_text())
    assert (12, True, str(IMAGE)) == (len(records), records[0]["text_qwen"].startswith("[qwen] reply"),
                                      manifest["images"]["deployments.qwen"]["image"])
