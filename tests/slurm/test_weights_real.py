"""Node-local weights on the real cluster (22.05, 24.11, 26.05): three replicas on two nodes read one
copy per node made by the staging step, the next attempt reuses both, an interrupted copy is never
used, and a missing source or a full local disk fails before any server starts.

The tree is DD_SLURM_WEIGHTS_TEST_MB megabytes (64 by default; the issue's check is 2048)."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from dd_slurm.runtime.node.weights import MANIFEST_SUFFIX, copy_path
from tests.runtime.harness import evidence, outcome, servers_started
from tests.slurm.clusters import table
from tests.slurm.conftest import wait_until
from tests.slurm.real_attempt import EXE, submit, wait_job_gone, wait_state
from tests.weights_trees import loaded_paths, model_tree, same_tree, staged_events, weights_plan

LAB = Path(os.environ.get("DD_SLURM_LAB_DIR", "/var/lib/dd-slurm-lab"))
MEGABYTES = int(os.environ.get("DD_SLURM_WEIGHTS_TEST_MB", "64"))


def submit_in(folder: Path, data: dict, name: str) -> tuple[Path, str]:
    """Submit from its own folder (and workspace), so two attempts of one test are side by side."""
    folder.mkdir()
    return submit(folder, data, name)


def finished(attempt_dir: Path, job_id: str) -> tuple[str | None, str | None]:
    wait_state(attempt_dir, ("done",), 400)
    wait_job_gone(job_id)
    return outcome(attempt_dir)


@pytest.mark.timeout(900)
def test_three_replicas_on_two_nodes_read_one_copy_per_node_and_the_next_attempt_reuses_it(tmp_path, cluster) -> None:
    """First attempt: each of the two nodes copies the tree once (counted: one journal event and one
    finished copy per node), every server loads its node's copy, the attempt succeeds. Second
    attempt: every node it shares with the first (at least one) reuses its copy, staging in under
    1 s; a node it did not share copies."""
    source = model_tree(tmp_path / "model", MEGABYTES)
    local = tmp_path / "local"
    data = weights_plan(source, str(local / "{node}"), ready_timeout_s=300)
    first, job = submit_in(tmp_path / "a", data, "weights-first")
    assert ("succeeded", "ok") == finished(first, job), evidence(first)
    events = staged_events(first)
    copies = sorted(str(p.with_name(p.name.removesuffix(MANIFEST_SUFFIX))) for p in local.glob(f"*/*/*{MANIFEST_SUFFIX}"))
    assert ([False, False], [e["copy"] for e in events]) == ([e["reused"] for e in events], copies)
    node_of = {e["copy"]: e["node"] for e in events}
    loaded_on = [node_of.get(path, path) for path in loaded_paths(first)]  # a path not a copy stays itself
    assert [1, 2] == sorted(loaded_on.count(node) for node in set(loaded_on)), loaded_on
    assert all(same_tree(source, Path(c)) for c in copies)
    shown = subprocess.run(EXE + ["inspect", str(first), "--timeline"], capture_output=True, text=True, timeout=60)
    rows = sorted(line.strip().split("  ")[0] for line in shown.stdout.splitlines() if "weights on " in line)
    assert [f"weights on {e['node']}" for e in events] == rows, shown.stdout
    second, job = submit_in(tmp_path / "b", data, "weights-again")
    assert ("succeeded", "ok") == finished(second, job), evidence(second)
    again = staged_events(second)
    had_copy = {e["node"] for e in events}  # the scheduler may give the second attempt another pair of the 3 nodes;
    reused = [e for e in again if e["reused"]]  # any two pairs share a node
    assert ([e["node"] in had_copy for e in again], True, True) == (
        [e["reused"] for e in again], bool(reused), all(e["seconds"] < 1.0 for e in reused)), again


def unfinished_copy(source: Path, local: Path, node: str) -> tuple[Path, int]:
    """The node's copy as a SIGKILL mid-copy leaves it (tests/runtime/node/test_weights.py does
    that for real): renamed into place without its manifest, a killed stager's partial beside it;
    and its lock, held (open file descriptor), as a stager behind a slow copy would find it."""
    target = Path(copy_path(str(source), str(local / "{node}"), node, None, os.getuid()))
    target.parent.mkdir(parents=True, mode=0o700)
    (target / "tokenizer").mkdir(parents=True)
    (target / "config.json").write_text("torn")
    (target.parent / f"{target.name}.partial.{node}.4242").mkdir()
    lock = os.open(f"{target}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return target, lock


@pytest.mark.timeout(900)
def test_an_interrupted_copy_is_never_used(tmp_path, cluster) -> None:
    """Every node's copy left unfinished and its lock held, and a cancel while staging waits: the
    cancelled attempt ends cancelled with no server started and the unfinished copies untouched;
    the next attempt copies the tree again on both of its nodes (not reused), byte-identical to
    the source, with no partial left."""
    source = model_tree(tmp_path / "model", MEGABYTES)
    local = tmp_path / "local"
    data = weights_plan(source, str(local / "{node}"), ready_timeout_s=300)
    left = {node: unfinished_copy(source, local, node) for node in ("n1", "n2", "n3")}
    try:
        cancelled, job = submit_in(tmp_path / "a", data, "weights-cancel")
        wait_until(lambda: (cancelled / "logs" / "stage-weights.log").exists(), 120, "the staging step")
        out = subprocess.run(EXE + ["cancel", str(cancelled)], capture_output=True, text=True, timeout=60,
                             env=cluster.env())
        assert 0 == out.returncode, out.stderr
        result = finished(cancelled, job)
    finally:
        for _target, lock in left.values():
            os.close(lock)
    assert (("cancelled", "sigterm"), [], {"torn"}) == (
        result, servers_started(cancelled), {(t / "config.json").read_text() for t, _lock in left.values()})
    fresh, job = submit_in(tmp_path / "b", data, "weights-after-cancel")
    assert ("succeeded", "ok") == finished(fresh, job), evidence(fresh)
    events = staged_events(fresh)
    copies = [Path(e["copy"]) for e in events]
    assert ([False, False], [True, True], []) == (
        [e["reused"] for e in events], [same_tree(source, c) for c in copies],
        [p for c in copies for p in c.parent.glob("*.partial.*")])  # the attempt's nodes; the third keeps its own


def mount_tmpfs(cluster, where: Path, size: str) -> list[str]:
    """A small tmpfs at `where` as the cluster's nodes see it (this machine's mounts for 22.05; the
    rooted releases' slurmd run in their own mount namespace: mounted there); the unmount argv."""
    holder = LAB / cluster.version / "node-ns"
    enter = [] if table()[cluster.version]["root"] == "host" else \
        ["nsenter", f"--mount=/proc/{holder.read_text().split()[0]}/ns/mnt", "--"]
    subprocess.run([*enter, "mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, timeout=30)
    return [*enter, "umount", str(where)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", ["weights_missing", "weights_space"])
def test_a_missing_source_or_a_full_local_disk_fails_before_any_server_starts(tmp_path, cluster, fault) -> None:
    """A weights path that does not exist fails weights_missing; a 1 MiB tmpfs as local_dir (the
    tree needs more) fails weights_space; in both no server was started."""
    local = tmp_path / "small"
    local.mkdir()
    source = tmp_path / "no-such-model" if fault == "weights_missing" else model_tree(tmp_path / "model", 8)
    unmount = mount_tmpfs(cluster, local, "1m") if fault == "weights_space" else None
    try:
        attempt, job = submit(tmp_path, weights_plan(source, str(local), ready_timeout_s=300), f"weights-{fault.split('_')[1]}")
        result = finished(attempt, job)
    finally:
        if unmount:
            subprocess.run(unmount, timeout=30)
    assert (("failed", fault), []) == (result, servers_started(attempt)), evidence(attempt)
