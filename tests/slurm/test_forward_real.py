"""`env.forward` through `submit` on the real cluster: the submitting environment's value, and
only it, reaches the client."""

from __future__ import annotations

import json

import pytest

from tests.runtime.harness import outcome, plan_data, read
from tests.slurm.real_attempt import submit, wait_job_gone, wait_state

DUMP = ("import json, os; json.dump({{n: os.environ.get(n) for n in ('DDT_FORWARDED', 'DDT_NOT_FORWARDED')}}, "
        "open('{results_dir}/seen.json', 'w'))")  # {{ }}: literal braces in plan argv


@pytest.mark.timeout(180)
def test_a_forwarded_variable_reaches_the_client_through_submit(tmp_path, cluster) -> None:
    """The plan forwards DDT_FORWARDED; `dd-slurm submit` runs with it (and another variable the
    plan does not name) in its environment; the client, started by the runtime inside the job,
    writes what it sees: the forwarded value, and nothing for the other."""
    data = plan_data("single-node")
    data["client"].update(argv=["/usr/bin/python3", "-c", DUMP], preflight_argv=None,
                          env={"set": {}, "forward": ["DDT_FORWARDED"]},
                          result={"path": "seen.json", "format": "json", "min_records": 1})
    env = {**cluster.env(), "DDT_FORWARDED": "value from the login node", "DDT_NOT_FORWARDED": "stays home"}
    attempt_dir, job_id = submit(tmp_path, data, "forward", env=env)
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir)
    seen = read(attempt_dir, "results/seen.json")
    assert {"DDT_FORWARDED": "value from the login node", "DDT_NOT_FORWARDED": None} == seen
    assert "value from the login node" not in json.dumps(read(attempt_dir, "attempt.json"))
