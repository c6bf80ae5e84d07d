"""Routing choice (pure): least outstanding requests under the caps, ties in turn."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.gateway.router import pick

pytestmark = pytest.mark.timeout(60)

replicas = st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 5), min_size=n, max_size=n), st.lists(st.integers(1, 6), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n), st.integers(0, 20)))


@given(replicas)
def test_pick_is_a_least_loaded_eligible_replica(case) -> None:
    """The choice is usable, below its cap, and no eligible replica has fewer outstanding
    requests; None exactly when no replica is eligible."""
    loads, caps, usable, cursor = case
    eligible = [i for i in range(len(loads)) if usable[i] and loads[i] < caps[i]]
    chosen = pick(loads, caps, usable, cursor)
    if not eligible:
        assert chosen is None
        return
    assert chosen in eligible
    assert loads[chosen] == min(loads[i] for i in eligible)


@given(replicas)
def test_ties_go_to_the_first_at_or_after_the_cursor(case) -> None:
    """Of equally loaded eligible replicas, the first at or after the cursor (wrapping) wins."""
    loads, caps, usable, cursor = case
    chosen = pick(loads, caps, usable, cursor)
    if chosen is None:
        return
    count = len(loads)
    order = [(cursor + k) % count for k in range(count)]
    tied = [i for i in order if usable[i] and loads[i] < caps[i] and loads[i] == loads[chosen]]
    assert tied[0] == chosen


@given(st.integers(1, 8), st.integers(0, 7))
def test_moving_the_cursor_past_each_choice_visits_every_idle_replica_in_turn(count, start) -> None:
    """Idle replicas, cursor moved past each choice: `count` picks visit every replica once."""
    cursor, seen = start, []
    for _ in range(count):
        chosen = pick([0] * count, [1] * count, [True] * count, cursor)
        seen.append(chosen)
        cursor = chosen + 1
    assert sorted(seen) == list(range(count))
