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


ENV_DUMP = "import json, os; json.dump(dict(os.environ), open('{results_dir}/env.json', 'w'))"


@pytest.mark.timeout(180)
def test_the_client_step_sees_exactly_the_documented_environment(tmp_path, cluster) -> None:
    """What the README's "On a real cluster" says a step gets: PATH /usr/local/bin:/usr/bin:/bin,
    LC_ALL C.UTF-8, no HOME, the plan's `set` and forwarded names, the key variable, dd-slurm's
    DD_SLURM_* and Slurm's SLURM_* (and CUDA_VISIBLE_DEVICES on a GPU step); nothing of the
    submitting shell (its HOME, USER, a module system's variables)."""
    data = plan_data("single-node")
    data["client"].update(argv=["/usr/bin/python3", "-c", ENV_DUMP], preflight_argv=None,
                          env={"set": {"HF_HOME": "/shared/hf"}, "forward": ["DDT_FORWARDED"],
                               "api_key_var": "OPENAI_API_KEY"},
                          result={"path": "env.json", "format": "json", "min_records": 1})
    env = {**cluster.env(), "DDT_FORWARDED": "x", "HOME": "/root", "USER": "root", "MODULEPATH": "/etc/modules"}
    attempt_dir, job_id = submit(tmp_path, data, "step-env", env=env)
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    assert ("succeeded", "ok") == outcome(attempt_dir)
    seen = read(attempt_dir, "results/env.json")
    others = sorted(n for n in seen if not n.startswith(("DD_SLURM_", "SLURM_", "SLURMD_")))
    assert (["DDT_FORWARDED", "HF_HOME", "LC_ALL", "OPENAI_API_KEY", "PATH"], "/usr/local/bin:/usr/bin:/bin",
            "C.UTF-8") == (others, seen["PATH"], seen["LC_ALL"])
