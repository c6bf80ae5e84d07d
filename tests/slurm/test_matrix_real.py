"""The fault matrix on the real cluster: the same cells as on fakes, signals sent by Slurm."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dd_slurm.control.report import disagreement
from tests.faults.matrix import CELLS, Cell, check_cell_aftermath
from tests.runtime.harness import no_leftovers, plan_data
from tests.slurm.real_attempt import EXE, submit, wait_job_gone, wait_state

ACTIONS = {
    "scancel": lambda job: [job],
    "sigterm": lambda job: ["--batch", "--signal=TERM", job],
    "sigusr1": lambda job: ["--batch", "--signal=USR1", job],
}
SHIM = """#!/usr/bin/python3
import os, sys
if "--job-name=deploy-small-0" in sys.argv:
    print("srun: error: Unable to create step for job: Requested node configuration is not available", file=sys.stderr)
    sys.exit(1)
os.execv({srun!r}, [{srun!r}] + sys.argv[1:])
"""


def srun_shim(directory: Path, cluster) -> Path:
    """A bin dir whose srun cannot start the step deploy-small-0 (partial startup). It runs in
    the job, so with the cluster's own Python (/usr/bin/python3 of its root)."""
    directory.mkdir()
    for tool in ("sbatch", "squeue", "sacct", "scancel", "scontrol"):
        os.symlink(cluster.tool(tool), directory / tool)
    shim = directory / "srun"
    shim.write_text(SHIM.format(srun=cluster.tool("srun")))
    shim.chmod(0o755)
    return directory


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_fault_cell_on_the_real_cluster(tmp_path, cell: Cell, cluster) -> None:
    """Each cell on real Slurm: done with the expected outcome and reason, cleanup once, terminal
    readiness, every tracked process accounted for, and nothing carrying the attempt's id on n1-n3."""
    data = plan_data(cell.plan)
    cell.mutate(data)
    env = cluster.env()
    if cell.action == "break_launch":
        env["DD_SLURM_BIN_DIR"] = str(srun_shim(tmp_path / "shim", cluster))
    attempt_dir, job_id = submit(tmp_path, data, f"cell-{cell.fault.replace('_', '-')}-{cell.state}", env)
    if cell.action in ACTIONS:
        wait_state(attempt_dir, (cell.state, "done"), 150)
        subprocess.run(["sleep", "0.05" if cell.state == "cleanup" else "0.5"], check=True)
        subprocess.run([cluster.tool("scancel"), *ACTIONS[cell.action](job_id)], check=True, timeout=30)
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    check_cell_aftermath(attempt_dir, cell, no_leftovers(attempt_dir.name))
    view = json.loads(subprocess.run(EXE + ["status", "--json", str(attempt_dir)], capture_output=True, text=True,
                                     timeout=60, check=True, env=cluster.env()).stdout)
    assert disagreement(view["attempt"], view["scheduler"]) is None, view
