"""The control plane against the real lab cluster: every job shape the issue names."""

from __future__ import annotations

import json
import subprocess

from dd_slurm.bundle.stage import stage
from dd_slurm.clock import Clock
from dd_slurm.plan.io import load_plan
from tests.conftest import PLANS
from tests.slurm.conftest import wait_until, write_script


def _obs(commands, job_id):
    from dd_slurm.scheduler.query import query

    return query([job_id], commands, Clock())


def test_held_job_is_pending_with_its_reason(tmp_path, job_prefix, real_commands) -> None:
    """A held job: pending, non-terminal, reason JobHeldUser."""
    script = write_script(tmp_path, "held", "sleep 1", f"--job-name={job_prefix}held", "--hold", "--output=/dev/null")
    job = real_commands.submit(script, f"{job_prefix}held").job_id
    found = wait_until(lambda: _obs(real_commands, job), 20, "the held job in squeue")[0]
    assert ("pending", False, "JobHeldUser") == (found.state, found.terminal, found.reason)


def test_running_then_completed(tmp_path, job_prefix, real_commands) -> None:
    """A short job is seen running, then completed with exit code 0 from sacct."""
    script = write_script(tmp_path, "ok", "sleep 3", f"--job-name={job_prefix}ok", "--output=/dev/null")
    job = real_commands.submit(script, f"{job_prefix}ok").job_id
    wait_until(lambda: _obs(real_commands, job)[0].state == "running", 30, "running")
    done = wait_until(lambda: [o for o in _obs(real_commands, job) if o.source == "sacct"], 60, "sacct record")[0]
    assert ("completed", True, 0) == (done.state, done.terminal, done.exit_code)


def test_failed_with_exit_code(tmp_path, job_prefix, real_commands) -> None:
    """`exit 7` is failed with exit_code 7."""
    script = write_script(tmp_path, "bad", "exit 7", f"--job-name={job_prefix}bad", "--output=/dev/null")
    job = real_commands.submit(script, f"{job_prefix}bad").job_id
    done = wait_until(lambda: [o for o in _obs(real_commands, job) if o.source == "sacct" and o.terminal], 60, "failed")
    assert ("failed", 7) == (done[0].state, done[0].exit_code)


def test_array_with_throttle_is_expanded_per_task(tmp_path, job_prefix, real_commands) -> None:
    """`--array=1-6%2`: six observations, two running, four pending on JobArrayTaskLimit."""
    script = write_script(tmp_path, "arr", "sleep 60", f"--job-name={job_prefix}arr", "--array=1-6%2",
                          "--output=/dev/null")
    job = real_commands.submit(script, f"{job_prefix}arr").job_id

    def settled():
        found = _obs(real_commands, job)
        return found if sorted(o.state for o in found) == ["pending"] * 4 + ["running"] * 2 else None

    found = wait_until(settled, 40, "two running tasks")
    assert [f"{job}_{i}" for i in range(1, 7)] == [o.job_id for o in found]
    assert {"JobArrayTaskLimit"} == {o.reason for o in found if o.state == "pending"}


def test_rendered_scripts_pass_sbatch_test_only(tmp_path, real_commands) -> None:
    """Every fixture plan's staged entrypoint is accepted by `sbatch --test-only` on the cluster."""
    for plan_file in sorted(PLANS.glob("*.json")):
        staged = stage(load_plan(plan_file), tmp_path / "ws", Clock())
        result = real_commands.test_only(staged.script)
        assert 0 == result.returncode, (plan_file.name, result.stderr)


def test_submit_status_cancel_through_the_cli(tmp_path, dd_slurm_exe, cluster) -> None:
    """`submit --json` returns at once with the job; `status --json` observes it from a fresh
    process; `cancel` ends it and `status` then shows it cancelled."""
    plan = json.loads((PLANS / "single-node.json").read_text())
    idle = tmp_path / "idle-runtime"  # the job only has to exist (and live until cancelled): not the runtime
    idle.write_text("#!/bin/sh\nexec sleep 300\n")
    idle.chmod(0o755)
    plan["runtime"]["python"] = str(idle)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = subprocess.run(dd_slurm_exe + ["submit", "--json", str(tmp_path / "plan.json"), "-w", str(tmp_path / "ws")],
                         capture_output=True, text=True, timeout=60, env=cluster.env())
    assert 0 == out.returncode, out.stderr
    submitted = json.loads(out.stdout)
    status = lambda: json.loads(subprocess.run(dd_slurm_exe + ["status", "--json", submitted["attempt_dir"]],
                                               capture_output=True, text=True, timeout=60, env=cluster.env()).stdout)
    first = status()
    assert (submitted["job_id"], "staged") == (first["scheduler"]["job_id"], first["attempt"]["state"])
    subprocess.run(dd_slurm_exe + ["cancel", submitted["attempt_dir"]], check=True, timeout=60, env=cluster.env())
    last = wait_until(lambda: (lambda s: s if s["scheduler"]["state"] == "cancelled" else None)(status()), 60,
                      "cancelled")
    assert last["scheduler"]["terminal"]
