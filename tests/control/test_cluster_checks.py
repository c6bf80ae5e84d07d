"""What `validate --cluster` checks from the login node, on recorded sinfo and mount tables: the
fit of the job's per-node request, and programs the compute nodes may not see."""

from __future__ import annotations

import json
import os

import pytest

from dd_slurm.control.cluster_checks import file_system, fit_errors, mounts, path_warnings
from dd_slurm.plan.io import parse_plan
from dd_slurm.scheduler.sinfo import parse_nodes
from tests.conftest import FIXTURES
from tests.runtime.harness import plan_data

SITE = parse_nodes((FIXTURES / "slurm" / "sinfo" / "site.txt").read_text())


def plan_with(**job):
    data = plan_data()
    data["job"].update(job)
    return parse_plan(json.dumps(data))


@pytest.mark.parametrize(("job", "expected"), [
    ({"partition": "gpu", "gpus_per_node": 8, "nodes": 1}, []),
    ({"partition": "gpu", "gpus_per_node": 9, "nodes": 1},
     ["job.gpus_per_node: 9 per node, but partition gpu's nodes have at most 8 GPUs (sinfo)"]),
    ({"partition": "gpu", "gpus_per_node": 4, "nodes": 1, "cpus_per_task": 129},
     ["job.cpus_per_task: 129 per node, but partition gpu's nodes have at most 128 CPUs (sinfo)"]),
    ({"partition": "gpu", "gpus_per_node": 1, "nodes": 1, "mem": "1024001M"},
     ['job.mem: "1024001M" per node, but partition gpu\'s nodes have at most 1024000 MB (sinfo)']),
    ({"partition": "gpu", "gpus_per_node": 4, "nodes": 2, "cpus_per_task": 65},
     ["job.nodes: 2 nodes, but partition gpu has 1 that can each hold the job's per-node request (sinfo)"]),
    ({"partition": "gpu", "gpus_per_node": 6, "nodes": 3},
     ["job.nodes: 3 nodes, but partition gpu has 2 that can each hold the job's per-node request (sinfo)"]),
    ({"partition": "long", "gpus_per_node": 8, "nodes": 1}, []),
    ({"partition": None, "gpus_per_node": 2, "nodes": 3}, []),
    ({"partition": "debug", "gpus_per_node": 1, "nodes": 1},
     ["job.partition: 'debug' is not a partition of this cluster (sinfo lists: cpu, gpu, long)"]),
])
def test_the_job_must_fit_the_partition_s_nodes(job: dict, expected: list) -> None:
    """Each per-node request against the most any node of the partition (the default one when
    unset) has, then the count of nodes holding all of it at once."""
    assert expected == fit_errors(plan_with(**job), SITE)


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /shared rw,relatime shared:5 - nfs4 server:/export rw
31 30 0:41 / /shared/scratch rw - lustre 10.0.0.1@tcp:/scratch rw
32 22 0:42 / /tmp rw - tmpfs tmpfs rw
33 22 0:43 / /with\\040space rw - xfs /dev/sdb1 rw
"""


@pytest.mark.parametrize(("path", "kind"), [("/shared/ws", "nfs4"), ("/shared/scratch/x", "lustre"), ("/tmp/a", "tmpfs"),
                                            ("/opt/vllm/bin/vllm", "ext4"), ("/sharedx/y", "ext4"),
                                            ("/with space/bin", "xfs")])
def test_a_path_s_file_system_is_its_longest_mount(path: str, kind: str) -> None:
    assert kind == file_system(path, mounts(MOUNTINFO))


def test_programs_missing_here_or_on_a_local_disk_are_warned_about(tmp_path) -> None:
    """A program that is not here, and one on this machine's own disk (not a system dir), are
    each one warning naming the field; a workspace on a local disk too; /usr/bin is every node's."""
    exe = tmp_path / "serve"
    exe.write_text("#!/bin/sh\n")
    os.chmod(exe, 0o755)
    data = plan_data()
    data["deployments"][0]["argv"][0] = str(exe)
    data["client"]["argv"][0] = "/nonexistent/python"
    data["runtime"]["python"] = "/usr/bin/python3"
    table = [(str(tmp_path), "ext4"), ("/", "nfs4")]
    assert [f"warning: deployments[0].argv[0]: {exe} is on a local file system here (ext4); the compute nodes need "
            "it at the same path",
            "warning: client.argv[0]: /nonexistent/python is not an executable on this node; the compute nodes need it",
            f"warning: workspace {tmp_path} is on a local file system here (ext4); the compute nodes must see it at "
            "the same path"] == path_warnings(parse_plan(json.dumps(data)), table, str(tmp_path))
