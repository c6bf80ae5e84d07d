"""Node-local weights through whole attempts on fake Slurm: one copy per node before any server
starts, `{weights}` as the node's copy, reuse by the next attempt, and the two failures the probe
finds first."""

from __future__ import annotations

import pytest

from tests.runtime.harness import evidence, failure_path, journal, run, servers_started
from tests.weights_trees import loaded_paths, model_tree, staged_events, weights_plan


@pytest.mark.timeout(120)
def test_three_replicas_on_two_nodes_read_one_copy_per_node_and_the_next_attempt_reuses_them(tmp_path, fake_slurm) -> None:
    """Each node copies once (the journal has one `weights_staged` per node, all copied), every
    server loads `{weights}` = its node's copy, and a second attempt on the same nodes reuses both."""
    source = model_tree(tmp_path / "model")
    data = weights_plan(source, str(tmp_path / "local" / "{node}"))
    attempt, staged = run(tmp_path / "a", fake_slurm, data)
    assert ("succeeded", "ok") == (attempt.outcome, attempt.reason), evidence(staged.attempt_dir)
    events = staged_events(staged.attempt_dir)
    copies = {e["node"]: e["copy"] for e in events}
    assert ([False, False], 2) == ([e["reused"] for e in events], len(copies))
    assert sorted([copies["127.0.2.1"]] * 2 + [copies["127.0.2.2"]]) == loaded_paths(staged.attempt_dir)
    again, staged_again = run(tmp_path / "b", fake_slurm, data)
    assert ("succeeded", [True, True]) == (again.outcome, [e["reused"] for e in staged_events(staged_again.attempt_dir)])


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("reason", "make"), [
    ("weights_missing", lambda tmp: (tmp / "no-such-model", str(tmp / "local"))),
    ("weights_space", lambda tmp: (model_tree(tmp / "model"), "/proc/{node}")),
])
def test_a_missing_source_or_no_room_fails_before_any_server_starts(tmp_path, fake_slurm, reason, make) -> None:
    """The node probe finds a source that is not there, or a local_dir without room (here: /proc,
    which has none), and the attempt fails with that reason; no server program ever ran."""
    source, local_dir = make(tmp_path)
    attempt, staged = run(tmp_path, fake_slurm, weights_plan(source, local_dir))
    assert (("failed", reason), failure_path(reason, probed=True), []) == (
        (attempt.outcome, attempt.reason), journal(staged.attempt_dir), servers_started(staged.attempt_dir)), \
        evidence(staged.attempt_dir)
