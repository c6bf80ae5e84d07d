"""Which cluster an attempt went to: ClusterName read from `scontrol show config`, the client for
a recorded cluster, and the job-name check every answer about an attempt's job passes."""

from __future__ import annotations

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.errors import SchedulerError
from dd_slurm.scheduler.commands import QueryResult, SlurmCommands
from dd_slurm.scheduler.parse import parse_cluster_name, parse_sacct, parse_squeue
from dd_slurm.scheduler.query import check_job_name

CONFIG = "Configuration data as of 2026-12-06T12:27:43\nAccountingStorageType   = accounting_storage/slurmdbd\n"


@pytest.mark.parametrize(("text", "expected"), [
    (CONFIG + "ClusterName             = ddlab2605\nCompleteWait            = 0 sec\n", "ddlab2605"),
    (CONFIG + "ClusterName = gpu-a100.east\n", "gpu-a100.east"),
    (CONFIG, None),  # no such line
    (CONFIG + "ClusterName             = \n", None),
    (CONFIG + "ClusterName             = two words\n", None),
    (CONFIG + "SlurmctldClusterName    = x\n", None),  # only the key itself, at a line's start
    ("", None),
])
def test_cluster_name_from_scontrol_show_config(text: str, expected) -> None:
    """The ClusterName line's value when it is a name; None otherwise (nothing is guessed)."""
    assert expected == parse_cluster_name(text)


def test_a_recorded_cluster_gets_its_own_tools_and_conf() -> None:
    """for_cluster: the same client when the record names this client's tools (or none), else one
    with the recorded tools and SLURM_CONF, whatever this shell's environment says."""
    here = SlurmCommands(FakeClock(), "/opt/a/bin", {"SLURM_CONF": "/etc/a.conf"})
    other = here.for_cluster({"name": "b", "bin_dir": "/opt/b/bin", "slurm_conf": "/etc/b.conf"})
    plain = here.for_cluster({"name": "b", "bin_dir": "/opt/b/bin", "slurm_conf": None})
    assert [True, True, True] == [here.for_cluster(None) is here, here.for_cluster(
        {"name": "a", "bin_dir": "/opt/a/bin", "slurm_conf": "/etc/a.conf"}) is here,
        here.for_cluster({"name": None, "bin_dir": None}) is here]
    assert [("/opt/b/bin/squeue", "/etc/b.conf"), ("/opt/b/bin/squeue", None)] == [
        (c.executable("squeue"), c.env.get("SLURM_CONF")) for c in (other, plain)]


def _result(squeue: str = "", sacct: str = "") -> QueryResult:
    return QueryResult(parse_squeue(squeue, raw_ids=True), parse_sacct(sacct, raw_ids=True), None, 2)


@pytest.mark.parametrize(("result", "problem"), [
    (_result("41|41|RUNNING|None|dd-a1\n"), None),
    (_result("", "41|41|COMPLETED|0:0|None|dd-a1\n"), None),
    (_result(), None),  # the job is unknown here: no row, nothing to check
    (_result("41|41|CANCELLED|None|dd-a1\n", "41|41|CANCELLED by 0|0:0|None|allocation\n"), None),  # 22.05's
    # accounting, just after a pending job was cancelled
    (_result("", "41|41|CANCELLED by 0|0:0|None|allocation\n41|41|RUNNING|0:0|None|train\n"),
     "job 41 here is 'train', not this attempt's 'dd-a1'"),
    (_result("41|41|RUNNING|None|train\n"), "job 41 here is 'train', not this attempt's 'dd-a1'"),
    (_result("", "41|41|COMPLETED|0:0|None|dd-a1\n41_2|43|FAILED|1:0|None|other\n"),
     "job 41_2 here is 'other', not this attempt's 'dd-a1'"),
])
def test_every_row_about_an_attempts_job_must_carry_its_name(result: QueryResult, problem) -> None:
    """squeue's and sacct's rows for the job id are believed only under the name dd-slurm gave
    the job; any other name is a SchedulerError naming both (and the attempt's cluster)."""
    cluster = {"name": "ddlab", "bin_dir": "/usr/bin"}
    if problem is None:
        assert None is check_job_name(result, "dd-a1", cluster)
        return
    with pytest.raises(SchedulerError) as caught:
        check_job_name(result, "dd-a1", cluster)
    assert f"{problem}: the id belongs to another job (it was submitted to cluster ddlab, tools in /usr/bin)" == str(
        caught.value)
