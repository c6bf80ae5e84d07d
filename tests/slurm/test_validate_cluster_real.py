"""`validate --cluster` on the real clusters: sinfo's per-node rows agree with `scontrol show
node`, a plan the nodes cannot hold is refused naming each field, and what only Slurm knows (an
unknown feature) comes from `sbatch --test-only`."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.conftest import PLANS
from tests.slurm.real_attempt import EXE


def validate(cluster, tmp_path, **job) -> subprocess.CompletedProcess:
    data = json.loads((PLANS / "single-node.json").read_text())
    data["job"].update(job)
    (tmp_path / "plan.json").write_text(json.dumps(data))
    return subprocess.run(EXE + ["validate", "--cluster", str(tmp_path / "plan.json")], capture_output=True, text=True,
                          timeout=60, env=cluster.env())


def test_sinfo_rows_agree_with_scontrol_show_node(cluster, real_commands) -> None:
    """Every node's CPUs, memory, GPUs and partitions as parsed from sinfo are what `scontrol show
    node -o` says (CPUTot, RealMemory, the gpu count in Gres, Partitions)."""
    shown = subprocess.run([cluster.tool("scontrol"), "show", "node", "-o"], capture_output=True, text=True, timeout=30)
    expected = set()
    for line in shown.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        gpus = sum(int(g.rsplit(":", 1)[1]) for g in re.sub(r"\([^)]*\)", "", fields["Gres"]).split(",")
                   if g.startswith("gpu:"))
        for partition in fields["Partitions"].split(","):
            expected.add((fields["NodeName"], partition, int(fields["CPUTot"]), int(fields["RealMemory"]), gpus))
    found = {(r.node, r.partition, r.cpus, r.memory_mb, r.gpus) for r in real_commands.nodes()}
    assert (expected, True) == (found, len(found) >= 3)


@pytest.mark.timeout(120)
def test_a_plan_the_nodes_cannot_hold_is_refused_field_by_field(cluster, tmp_path) -> None:
    """The lab's nodes have 4 GPUs, 2 CPUs and 4000 MB: asking 8, 16 and 16G per node is exit 2
    with one line per field; the plan as it is passes."""
    assert 0 == validate(cluster, tmp_path).returncode
    refused = validate(cluster, tmp_path, gpus_per_node=8, cpus_per_task=16, mem="16G")
    assert (2, ["job.gpus_per_node: 8 per node, but partition debug's nodes have at most 4 GPUs (sinfo)",
                "job.cpus_per_task: 16 per node, but partition debug's nodes have at most 2 CPUs (sinfo)",
                "job.mem: \"16G\" per node, but partition debug's nodes have at most 4000 MB (sinfo)"]) == (
        refused.returncode, [line.removeprefix("error: ") for line in refused.stderr.splitlines()
                             if line.startswith("error:")])


@pytest.mark.timeout(120)
def test_what_only_slurm_knows_comes_from_sbatch_test_only(cluster, tmp_path) -> None:
    """A constraint no node has fits sinfo's counts, and `sbatch --test-only` refuses it: exit 2,
    the one line quoting Slurm."""
    refused = validate(cluster, tmp_path, constraint="nosuchfeature")
    assert (2, ["error: job: sbatch --test-only refuses it: sbatch exited 1: allocation failure: "
                "Invalid feature specification"]) == (refused.returncode, refused.stderr.splitlines())


@pytest.mark.timeout(120)
def test_submit_refuses_a_job_the_partition_can_never_hold(cluster, tmp_path) -> None:
    """16 CPUs per node where nodes have 2: sbatch would queue the job forever (PartitionConfig);
    `submit` refuses it (exit 2) with validate --cluster's line, submits nothing, stages nothing."""
    data = json.loads((PLANS / "single-node.json").read_text())
    data["job"]["cpus_per_task"] = 16
    (tmp_path / "plan.json").write_text(json.dumps(data))
    done = subprocess.run(EXE + ["submit", str(tmp_path / "plan.json"), "-w", str(tmp_path / "ws")],
                          capture_output=True, text=True, timeout=60, env=cluster.env())
    assert (2, "error: job.cpus_per_task: 16 per node, but partition debug's nodes have at most 2 CPUs (sinfo); "
               "nothing was submitted (dd-slurm validate --cluster checks this)\n", []) == (
        done.returncode, done.stderr, list((tmp_path / "ws" / "attempts").glob("*")))


@pytest.mark.timeout(120)
def test_validate_cluster_names_forwarded_variables_not_set_here(cluster, tmp_path) -> None:
    """A plan forwarding HF_TOKEN, checked from a shell without it: the error submit would give."""
    data = json.loads((PLANS / "single-node.json").read_text())
    data["deployments"][0]["env"]["forward"] = ["HF_TOKEN"]
    (tmp_path / "plan.json").write_text(json.dumps(data))
    done = subprocess.run(EXE + ["validate", "--cluster", str(tmp_path / "plan.json")], capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in cluster.env().items() if k != "HF_TOKEN"})
    assert (2, ["error: not set in this environment, so they cannot be forwarded: HF_TOKEN "
                "(deployments[0].env.forward)"]) == (done.returncode, done.stderr.splitlines())
