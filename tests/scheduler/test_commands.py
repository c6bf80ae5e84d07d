"""The command client on fake Slurm: argv, retries, typed errors, no double submission, batching."""

from __future__ import annotations

import time

import pytest

from dd_slurm.errors import OutputError, ToolFailed, ToolMissing, ToolTimeout, Transient
from dd_slurm.scheduler.commands import SlurmCommands, id_chunks, tool_env


def _script(tmp_path, name="dd-test-1", body="sleep 30", *extra):
    """A batch script whose output goes to tmp_path (without --output, sbatch writes slurm-%j.out
    into the directory it runs in: here, wherever pytest was started)."""
    script = tmp_path / "job.sh"
    output = [] if any("--output" in e for e in extra) else [f'#SBATCH --output="{tmp_path}/slurm-%j.out"']
    script.write_text("\n".join(["#!/bin/bash", f'#SBATCH --job-name="{name}"', *output, *extra, body]) + "\n")
    return script


def test_transient_errors_are_retried_then_succeed(fake_slurm, fake_commands) -> None:
    """Two `Socket timed out` answers, then success: three squeue calls, one result."""
    fake_slurm.add_fault("squeue", exit=1, stderr="squeue: error: Socket timed out on send/recv operation\n", times=2)
    result = fake_commands.query(["123"])
    assert ([], 3) == (result.squeue, len(fake_slurm.calls("squeue")))


def test_transient_errors_give_up_after_the_bound(fake_slurm, fake_commands) -> None:
    """A controller that stays unreachable is a Transient (exit 3) after the bounded retries."""
    fake_slurm.add_fault("squeue", exit=1, stderr="Unable to contact slurm controller (connect failure)\n", times=5)
    with pytest.raises(Transient) as caught:
        fake_commands.query(["123"])
    assert (3, 3) == (caught.value.exit_code, len(fake_slurm.calls("squeue")))


def test_a_definite_failure_is_not_retried(fake_slurm, fake_commands, tmp_path) -> None:
    """sbatch rejecting a job is ToolFailed at once, stderr in the message."""
    fake_slurm.add_fault("sbatch", exit=1, stderr="sbatch: error: invalid partition specified: nope\n")
    with pytest.raises(ToolFailed) as caught:
        fake_commands.submit(_script(tmp_path), "dd-test-1")
    assert "invalid partition specified: nope" in str(caught.value)
    assert 1 == len(fake_slurm.calls("sbatch"))


def test_invalid_job_id_means_not_in_queue(fake_slurm, fake_commands) -> None:
    """squeue's `Invalid job id specified` (exit 1) is an empty queue, not a failure."""
    result = fake_commands.query(["999999"])
    assert ([], []) == (result.squeue, result.sacct)


def test_missing_tool(tmp_path, clock) -> None:
    """A bin dir without the tool: ToolMissing naming it."""
    commands = SlurmCommands(clock, str(tmp_path), {})
    with pytest.raises(ToolMissing) as caught:
        commands.query(["1"])
    assert "squeue" in str(caught.value)


def test_a_hanging_tool_times_out(fake_slurm, clock) -> None:
    """A call that does not answer within its timeout is a ToolTimeout; the child is reaped."""
    fake_slurm.add_fault("squeue", hang=30)
    commands = SlurmCommands(clock, str(fake_slurm.bin_dir), {}, timeout_s=1)
    with pytest.raises(ToolTimeout):
        commands.query(["1"])


def test_ambiguous_submission_adopts_the_job_instead_of_submitting_twice(fake_slurm, clock, tmp_path) -> None:
    """sbatch accepted the job but its answer was lost (timeout): the unique name finds it, and
    no second sbatch runs."""
    fake_slurm.add_fault("sbatch", hang=5, after_work=True)
    commands = SlurmCommands(clock, str(fake_slurm.bin_dir), {}, timeout_s=1)
    job_id = commands.submit(_script(tmp_path, "dd-unique-7"), "dd-unique-7").job_id
    assert (["1000"], 1) == ([job_id], len(fake_slurm.calls("sbatch")))


def test_ambiguous_submission_that_did_not_happen_is_an_error(fake_slurm, clock, tmp_path) -> None:
    """sbatch times out every time and no job carries the name: a clear error saying nothing was
    submitted, after a name lookup before each rerun."""
    fake_slurm.add_fault("sbatch", hang=5, times=3)
    commands = SlurmCommands(clock, str(fake_slurm.bin_dir), {}, timeout_s=1)
    with pytest.raises(ToolTimeout) as caught:
        commands.submit(_script(tmp_path, "dd-unique-8"), "dd-unique-8")
    assert "nothing was submitted" in str(caught.value)
    tools = [c["tool"] for c in fake_slurm.read()["calls"]]
    assert ["sbatch", "squeue", "sacct"] * 3 == tools


AMBIGUOUS = [
    "sbatch: error: Socket timed out on send/recv operation",
    "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
    "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
    "sbatch: error: slurm_persist_conn_open_without_init: failed to open persistent connection: Connection refused",
    "sbatch: error: Batch job submission failed: Connection reset by peer",
    "sbatch: error: Batch job submission failed: Resource temporarily unavailable",
]


@pytest.mark.parametrize("stderr", AMBIGUOUS)
@pytest.mark.parametrize("in_squeue", [True, False], ids=["queued", "already-left-the-queue"])
def test_a_created_job_behind_an_ambiguous_error_is_adopted_never_resubmitted(fake_slurm, fake_commands, tmp_path,
                                                                             stderr, in_squeue) -> None:
    """sbatch creates the job, then reports a transport error: the name is looked up in squeue
    --states=all and in sacct (where alone a short job that left the queue is), the job is
    adopted, and sbatch runs once."""
    fake_slurm.add_fault("sbatch", exit=1, stderr=stderr + "\n", after_work=True, job={"in_squeue": in_squeue})
    found = fake_commands.submit(_script(tmp_path, "dd-amb-1"), "dd-amb-1")
    assert ("1000", True, (), 1) == (found.job_id, found.adopted, found.duplicates, len(fake_slurm.calls("sbatch")))
    assert "adopted job 1000" in found.note


def test_several_jobs_of_the_name_adopt_the_first_and_cancel_the_others(fake_slurm, fake_commands, tmp_path) -> None:
    """An earlier lost submission left a job of the same unique name: the first is adopted, the
    others are cancelled, and the note says so."""
    script = _script(tmp_path, "dd-amb-2")
    fake_slurm.add_fault("sbatch", exit=1, stderr=AMBIGUOUS[0] + "\n", after_work=True, times=2)
    fake_commands.run_once("sbatch", ["--parsable", str(script)])  # the earlier, lost submission
    found = fake_commands.submit(script, "dd-amb-2")
    assert ("1000", ("1001",)) == (found.job_id, found.duplicates)
    assert [["1001"]] == fake_slurm.calls("scancel")
    assert "cancelled duplicate job(s) 1001" in found.note
    assert fake_slurm.read()["jobs"]["1001"]["cancelled_by"] is not None


def test_an_unanswerable_lookup_never_resubmits(fake_slurm, fake_commands, tmp_path) -> None:
    """sbatch's answer was lost and sacct cannot say whether the job exists: no second sbatch,
    and the error says to check by name."""
    fake_slurm.add_fault("sbatch", exit=1, stderr=AMBIGUOUS[0] + "\n")
    fake_slurm.add_fault("sacct", exit=1, stderr="sacct: error: Problem talking to the database: Connection refused\n",
                         times=3)
    from dd_slurm.errors import SubmissionUnknown

    with pytest.raises(SubmissionUnknown) as caught:
        fake_commands.submit(_script(tmp_path, "dd-amb-3"), "dd-amb-3")
    assert 1 == len(fake_slurm.calls("sbatch"))
    assert "not resubmitted" in str(caught.value) and "--name=dd-amb-3" in str(caught.value)


@pytest.mark.parametrize("job_id", ["--all", "-1", "1 2", "", "0", "12;rm", "\u0661"])
def test_scancel_gets_only_job_ids(fake_slurm, fake_commands, job_id) -> None:
    """Whatever reaches cancel, scancel never sees an option or anything but a job/task/step id."""
    from dd_slurm.errors import InvalidInput

    with pytest.raises(InvalidInput):
        fake_commands.cancel(job_id)
    assert [] == fake_slurm.calls("scancel")


def test_malformed_output_is_a_typed_error(fake_slurm, fake_commands) -> None:
    """squeue printing something unexpected is an OutputError naming the line."""
    fake_slurm.add_fault("squeue", exit=0, stdout="this is not squeue output\n")
    with pytest.raises(OutputError) as caught:
        fake_commands.query(["1"])
    assert "squeue line 1" in str(caught.value)


def test_failing_sacct_degrades_to_lag_information(fake_slurm, fake_commands) -> None:
    """sacct failing (slurmdbd down) is reported, not raised: the observation becomes lag."""
    fake_slurm.add_fault("sacct", exit=1, stderr="sacct: error: Problem talking to the database: Connection refused\n",
                         times=3)
    result = fake_commands.query(["5"])
    assert result.sacct is None and "Connection refused" in result.sacct_error


@pytest.mark.parametrize(("ids", "chunks"), [
    (["1"], 1), ([str(i) for i in range(100)], 1), ([str(10**6 + i) for i in range(10_000)], 1),
    ([str(10**6 + i) for i in range(50_000)], 4), ([f"7_{i}" for i in range(50_000)], 1),
])
def test_ids_are_batched_and_chunked_only_when_too_long(ids, chunks) -> None:
    """Any number of ids is one call, unless one argument would pass 100,000 characters;
    array tasks collapse to their job."""
    found = id_chunks(ids)
    assert chunks == len(found)
    assert all(len(c) < 100_000 for c in found)


def test_status_round_is_two_calls_for_many_jobs(fake_slurm, fake_commands) -> None:
    """One squeue and one sacct per round, for 10,000 jobs."""
    result = fake_commands.query([str(10**6 + i) for i in range(10_000)])
    assert 2 == result.calls == len(fake_slurm.calls())


def test_minimal_environment() -> None:
    """Slurm tools see PATH, LC_ALL=C and SLURM_CONF, nothing else of the caller's environment."""
    env = tool_env({"SLURM_CONF": "/etc/x.conf", "AWS_SECRET": "s", "SLURM_CPU_BIND": "none"}, "/opt/slurm/bin")
    assert {"PATH": "/opt/slurm/bin:/usr/local/bin:/usr/bin:/bin", "LC_ALL": "C", "SLURM_CONF": "/etc/x.conf"} == env


def test_fake_job_runs_and_reports_its_exit_code(fake_slurm, fake_commands, tmp_path) -> None:
    """The fake really runs the script: exit 3 becomes FAILED 3:0 in sacct."""
    job = fake_commands.submit(_script(tmp_path, "dd-x", "exit 3", f'#SBATCH --output="{tmp_path}/o"'), "dd-x").job_id
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        rows = fake_commands.query([job]).sacct
        if rows and rows[0].raw_state == "FAILED":
            break
        time.sleep(0.1)
    assert ("FAILED", 3) == (rows[0].raw_state, rows[0].exit_code)


@pytest.mark.parametrize(("since", "expected"), [
    (None, [("J_1", "failed", True)]),
    ("submission", [("J_1", "pending", False)]),
], ids=["without-since-the-older-job-shows", "since-the-submission"])
def test_a_reused_array_id_brings_no_older_tasks(fake_slurm, fake_commands, tmp_path, since, expected) -> None:
    """slurmctld lost its state and hands out job ids again: accounting still has an older array
    with this id (task 1 FAILED 4:0, ended an hour ago). Asked since the submission, sacct leaves
    those rows out and the held task reads pending; asked without, the older failure shows."""
    from dd_slurm.scheduler.observe import LagClock, index_rows, observe

    submitted = time.time()
    job = fake_commands.submit(_script(tmp_path, "dd-r", "sleep 1", "#SBATCH --hold", "#SBATCH --array=0-1"),
                               "dd-r").job_id
    fake_slurm.add_older_array(job, {0: ("COMPLETED", "0:0"), 1: ("FAILED", "4:0")}, ended_at=submitted - 3600)
    result = fake_commands.query([f"{job}_1"], None if since is None else submitted)
    found = observe([f"{job}_1"], index_rows(result.squeue), index_rows(result.sacct or []),
                    LagClock(submitted, 300))
    assert expected == [(o.job_id.replace(job, "J"), o.state, o.terminal) for o in found]
