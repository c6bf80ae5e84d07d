"""The main job end to end: the demo plan with the real Data Designer client (installed by
`make test` through fixtures/demo/client-env.sh) against fake model servers on n1+n2 and n3."""

from __future__ import annotations

import json

import pytest

from tests.runtime.harness import no_leftovers, outcome, plan_data, read
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state


@pytest.mark.timeout(300)
def test_demo_plan_with_the_real_data_designer_client(tmp_path) -> None:
    """The demo plan succeeds: the preflight validated the config offline, the client wrote 12
    records with a sampler column and one LLM column per alias, and nothing is left running."""
    attempt_dir, job_id = submit(tmp_path, plan_data("demo"), "demo-e2e")
    wait_state(attempt_dir, ("done",), 240)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir), (attempt_dir / "logs" / "client.log").read_text()[-2000:]
    records = [json.loads(line) for line in (attempt_dir / "results" / "records.jsonl").read_text().splitlines()]
    assert (12, {"topic", "record_id", "text_big_model", "text_small_model"}) == (len(records), set(records[0]))
    assert records[0]["text_big_model"].startswith("[big-model] reply")
    assert "preflight ok" in (attempt_dir / "logs" / "preflight.log").read_text()
    assert 12 == read(attempt_dir, "result-manifest.json")["records"]
    assert [] == no_leftovers(attempt_dir.name)
