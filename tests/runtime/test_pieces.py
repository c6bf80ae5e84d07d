"""Unit tests of the runtime's pure pieces: hostlists, placement, step vectors, readiness writer,
result validation (including the pure-Python Parquet footer reader), signals, the step launcher."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import AttemptFailure, VerificationError
from dd_slurm.plan.io import parse_plan
from dd_slurm.plan.placement import place_replicas
from dd_slurm.plan.records import Result
from dd_slurm.runtime.hostlist import expand_hostlist
from dd_slurm.runtime.node.stepexec import step_environment
from dd_slurm.runtime.parquet_rows import parquet_num_rows
from dd_slurm.runtime.results import validate_result
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.step_specs import Layout, replica_steps, srun_argv
from dd_slurm.store.readiness import Readiness, ReadinessError, is_terminal, validate_record
from tests.conftest import FIXTURES, PLANS

RESULTS = FIXTURES / "results"


@pytest.mark.parametrize(("text", "expected"), [
    ("n1", ["n1"]), ("n[1-3]", ["n1", "n2", "n3"]), ("gpu-[01-03],login1", ["gpu-01", "gpu-02", "gpu-03", "login1"]),
    ("a[1,3-4]", ["a1", "a3", "a4"]), ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("127.0.2.1,127.0.2.2", ["127.0.2.1", "127.0.2.2"]),
])
def test_hostlists_expand_like_scontrol_show_hostnames(text, expected) -> None:
    """Slurm hostlist expressions expand as `scontrol show hostnames` does."""
    assert expected == expand_hostlist(text)


@given(st.text(alphabet="abcxyz-", min_size=1, max_size=5), st.integers(0, 200), st.integers(0, 30),
       st.integers(1, 4))
def test_hostlist_ranges_keep_their_width(prefix, low, span, width) -> None:
    """A zero-padded range expands to each number at the padded width, in order."""
    high = low + span
    text = f"{prefix}[{str(low).zfill(width)}-{str(high).zfill(width)}]"
    expected = [prefix + str(n).zfill(width) for n in range(low, high + 1)]
    assert expected == expand_hostlist(text)


def _plan(name="two-deployments", **job):
    data = json.loads((PLANS / f"{name}.json").read_text())
    data["job"].update(job)
    return parse_plan(json.dumps(data))


def place(plan, nodes, gpus):
    """Replica 0 of each deployment, by deployment name."""
    return {u.deployment: u for u in place_replicas(plan, nodes, gpus) if u.replica == 0}


def test_placement_of_the_two_deployment_plan() -> None:
    """The two-node deployment takes the first two nodes (slots 0,1 each), the other the third."""
    placed = place(_plan(), ("n1", "n2", "n3"), 2)
    assert {"big": (("n1", "n2"), (0, 1)), "small": (("n3",), (0,))} == \
        {k: (v.nodes, v.gpu_slots) for k, v in placed.items()}


def test_co_located_deployments_get_disjoint_gpu_slots() -> None:
    """With room on one node, two deployments share it on different GPUs (largest placed first)."""
    data = json.loads((PLANS / "single-node.json").read_text())
    data["job"]["gpus_per_node"] = 4
    data["deployments"].append(dict(data["deployments"][0], name="other", model_alias="other", port=18999,
                                    gpus_per_node=3))
    placed = place(parse_plan(json.dumps(data)), ("n1",), 4)
    assert ((3,), (0, 1, 2)) == (placed["small"].gpu_slots, placed["other"].gpu_slots)


def test_impossible_placement_is_a_verification_error() -> None:
    """Three nodes of work on two nodes: a placement failure naming the deployment."""
    with pytest.raises(VerificationError) as caught:
        place(_plan(), ("n1", "n2"), 2)
    assert "placement" == caught.value.reason


def test_step_argument_vector_and_follower_placeholders(tmp_path) -> None:
    """Each rank becomes one srun vector (no shell); the follower gets its rank and the leader's
    host; the launcher expands the argv; srun exports names only."""
    from dd_slurm.plan.fields import expand

    plan = _plan()
    placed = place(plan, ("n1", "n2", "n3"), 2)
    layout = Layout("a-1", "/ws/a-1", "/ws/a-1/endpoints.json", "/ws/a-1/results")
    leader, follower = replica_steps(plan, plan.deployments[0], placed["big"], layout, {})
    argv = [expand(a, follower.values) for a in follower.argv]
    assert ("deploy-big-0", "deploy-big-0-1") == (leader.name, follower.name)
    assert ("n2", "1", "n1") == (follower.node, argv[argv.index("--node-rank") + 1], argv[argv.index("--leader") + 1])
    assert "/ws/a-1/bundle/lib/dd_slurm/testing/fake_model.py" == expand(leader.argv[1], leader.values)
    expected = ["/usr/bin/srun", "--jobid=77", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--overlap", "--gres=gpu:2",
                "--cpus-per-task=1", "--export=DD_SLURM_ATTEMPT_ID,DD_SLURM_ROLE", "--kill-on-bad-exit=1",
                "--job-name=deploy-big-0",
                "/usr/bin/python3", "-I", "-S", "/b/entry.py", "_step", "/s.json"]
    assert expected == srun_argv(leader, "/usr/bin/srun", "77", ["/usr/bin/python3", "-I", "-S"], "/b/entry.py",
                                 "/s.json")


def test_launcher_narrows_gpus_to_the_placed_slots() -> None:
    """The step sees the node's GPUs (Slurm's CUDA_VISIBLE_DEVICES); the program sees only its slots."""
    env, problem = step_environment({"env": {"A": "1"}, "gpu_slots": [2, 3]},
                                    {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "SLURM_STEP_ID": "3", "HOME": "/root"})
    assert (None, {"A": "1", "SLURM_STEP_ID": "3", "CUDA_VISIBLE_DEVICES": "6,7"}) == (problem, env)
    _env, problem = step_environment({"env": {}, "gpu_slots": [0, 1]}, {"CUDA_VISIBLE_DEVICES": "0"})
    assert problem is not None


def _readiness(tmp_path):
    return Readiness.new(tmp_path, "a-1", {"big-0": {"deployment": "big", "replica": 0, "nodes": ["n1"]},
                                           "small-0": {"deployment": "small", "replica": 0, "nodes": ["n2"]}})


def test_readiness_writer_accepts_the_forward_path_and_ends_terminal(tmp_path) -> None:
    """pending -> starting -> ready -> stopped with endpoints published then withdrawn is valid."""
    record = _readiness(tmp_path)
    for name in ("big-0", "small-0"):
        record.move(name, "starting")
        record.move(name, "ready", ready=["http://x/v1"])
    record.endpoints("published")
    record.finish()
    on_disk = json.loads((tmp_path / "readiness.json").read_text())
    assert ([], True) == (validate_record(on_disk), is_terminal(on_disk))


@pytest.mark.parametrize(("path", "bad"), [((), "ready"), (("starting", "ready"), "starting"),
                                           (("failed",), "ready"), (("stopped",), "starting")])
def test_readiness_writer_refuses_backward_moves(tmp_path, path, bad) -> None:
    """The writer validates transitions: no skipping to ready, no going back, final states stay."""
    record = _readiness(tmp_path)
    for state in path:
        record.move("big-0", state)
    with pytest.raises(ReadinessError):
        record.move("big-0", bad)


@given(st.lists(st.sampled_from(["pending", "starting", "ready", "failed", "stopped"]), max_size=8))
def test_readiness_record_is_always_valid_on_disk(tmp_path_factory, moves) -> None:
    """Whatever moves are tried, the file on disk is always a valid record, and finish() makes it terminal."""
    directory = tmp_path_factory.mktemp("r")
    record = _readiness(directory)
    for state in moves:
        try:
            record.move("big-0", state)
        except ReadinessError:
            pass
        assert [] == validate_record(json.loads((directory / "readiness.json").read_text()))
    record.finish()
    assert is_terminal(json.loads((directory / "readiness.json").read_text()))


@pytest.mark.parametrize(("name", "rows"), [("three-rows.parquet", 3), ("many-rows.parquet", 1234)])
def test_parquet_row_count_from_the_footer(name, rows) -> None:
    """Row counts of real Parquet files (written by pyarrow) read without pyarrow."""
    assert rows == parquet_num_rows(RESULTS / name)


@pytest.mark.parametrize(("name", "fmt", "minimum", "expected"), [
    ("three.jsonl", "jsonl", 3, 3), ("two.json", "json", 2, 2), ("three-rows.parquet", "parquet", 3, 3),
    ("three.jsonl", "file", 1, None),
])
def test_valid_results_give_a_manifest(name, fmt, minimum, expected) -> None:
    """A valid candidate yields its record count, size and sha256."""
    manifest = validate_result(RESULTS, Result(path=name, format=fmt, min_records=minimum))
    assert (expected, 64) == (manifest["records"], len(manifest["sha256"]))


@pytest.mark.parametrize(("name", "fmt", "minimum", "reason"), [
    ("missing.jsonl", "jsonl", 0, "result_missing"), ("broken.jsonl", "jsonl", 0, "result_invalid"),
    ("three.jsonl", "jsonl", 4, "result_too_few_records"), ("three.jsonl", "parquet", 0, "result_invalid"),
])
def test_invalid_results_fail_with_a_reason(name, fmt, minimum, reason) -> None:
    """Missing, unparsable or too small candidates fail the attempt with a specific reason."""
    with pytest.raises(AttemptFailure) as caught:
        validate_result(RESULTS, Result(path=name, format=fmt, min_records=minimum))
    assert reason == caught.value.reason


def test_result_symlink_out_of_the_results_dir_is_refused(tmp_path) -> None:
    """A result that is a symlink leading outside the results dir is not accepted."""
    (tmp_path / "outside.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "results").mkdir()
    os.symlink(tmp_path / "outside.jsonl", tmp_path / "results" / "r.jsonl")
    with pytest.raises(AttemptFailure) as caught:
        validate_result(tmp_path / "results", Result(path="r.jsonl", format="jsonl", min_records=0))
    assert "result_outside_results_dir" == caught.value.reason


@pytest.mark.parametrize(("signo", "expected"), [(signal.SIGTERM, ("cancelled", "sigterm")),
                                                 (signal.SIGUSR1, ("timed_out", "pre_timeout_signal")),
                                                 (signal.SIGINT, ("cancelled", "sigint")),
                                                 (signal.SIGHUP, ("failed", "sighup"))])
def test_signals_are_recorded_then_decided_at_the_next_check(signo, expected) -> None:
    """A handler only records; `check` raises the outcome; later signals are reported as unheeded."""
    gate = SignalGate().install()
    try:
        os.kill(os.getpid(), signo)
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(AttemptFailure) as caught:
            gate.check()
        assert expected == (caught.value.outcome, caught.value.reason)
        assert ["sigterm"] == gate.unheeded()
    finally:
        gate.uninstall()


def test_signals_during_spawns_never_leave_an_untracked_child(tmp_path) -> None:
    """While another process floods the supervisor with SIGTERM/SIGUSR1 (from before the first
    spawn until after the last), 40 or more spawns each end up registered (in memory and in
    processes.json) and are all waited for: handlers only record, so no signal can land between a
    fork and the registration of its child. Signals provably arrived during the spawns."""
    import subprocess
    import sys

    from dd_slurm.clock import Clock
    from dd_slurm.runtime.process_table import ProcessTable

    gate = SignalGate().install()
    flood = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, sys, time\n"
        "pid, i = int(sys.argv[1]), 0\n"
        "while True:\n"
        "    os.kill(pid, signal.SIGTERM if i % 2 else signal.SIGUSR1)\n"
        "    i += 1\n"
        "    time.sleep(0.001)\n"), str(os.getpid())])
    table = ProcessTable(tmp_path, Clock())
    try:
        deadline = Clock().monotonic() + 20
        while not gate.received and Clock().monotonic() < deadline:
            time.sleep(0.001)
        before = len(gate.received)
        spawned = 0  # at least 40, and on until 40 signals landed during the spawns (a fast machine)
        while spawned < 40 or (len(gate.received) - before < 40 and spawned < 400):
            table.spawn(f"child-{spawned}", ["/bin/true"], {"PATH": "/usr/bin:/bin"}, tmp_path / "log")
            spawned += 1
        during = len(gate.received) - before
    finally:
        flood.kill()
        flood.wait(timeout=30)
        gate.uninstall()
    recorded = json.loads((tmp_path / "processes.json").read_text())["processes"]
    assert spawned == len(table.procs) == len(recorded)
    assert all(table.wait(name, Clock().monotonic() + 10) == 0 for name in table.procs)
    assert before > 0 and during >= 40, f"signals before the spawns: {before}, during them: {during}"


def test_replicas_of_a_one_gpu_model_pack_onto_a_shared_node() -> None:
    """Eight 1-GPU replicas on two 4-GPU nodes fill n1's slots 0-3, then n2's; ports are port + k."""
    data = json.loads((PLANS / "single-node.json").read_text())
    data["job"].update(nodes=2, gpus_per_node=4)
    data["deployments"][0].update(gpus_per_node=1, replicas=8, port=9000)
    units = place_replicas(parse_plan(json.dumps(data)), ("n1", "n2"), 4)
    expected = [(f"small-{k}", ("n1",) if k < 4 else ("n2",), (k % 4,), 9000 + k) for k in range(8)]
    assert expected == [(u.name, u.nodes, u.gpu_slots, u.port) for u in units]


def test_best_fit_leaves_whole_nodes_for_large_replicas() -> None:
    """A 1-GPU replica goes to the node with the least room that holds it, keeping a whole node free."""
    data = json.loads((PLANS / "single-node.json").read_text())
    data["job"].update(nodes=2, gpus_per_node=4)
    small = dict(data["deployments"][0], gpus_per_node=1, replicas=1, port=None)
    mid = dict(small, name="mid", model_alias="mid", gpus_per_node=3)
    big = dict(small, name="big", model_alias="big", gpus_per_node=4)
    data["deployments"] = [small, mid, big]
    units = {u.deployment: u.nodes for u in place_replicas(parse_plan(json.dumps(data)), ("n1", "n2"), 4)}
    assert {"big": ("n1",), "mid": ("n2",), "small": ("n2",)} == units
