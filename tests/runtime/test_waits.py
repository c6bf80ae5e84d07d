"""wait_until, the one wait every guard uses: it returns what `ready` gave once it is not None,
None once the deadline has passed, runs its check before every call of `ready`, and pauses `poll`
(or what a callable poll says) between rounds on the clock it is given."""

from __future__ import annotations

from typing import Optional

import pytest

from dd_slurm.clock import FakeClock
from dd_slurm.runtime.waits import wait_until


class Script:
    """`ready` that answers None until call number `ready_at` (never: None), recording each call's time."""

    def __init__(self, clock: FakeClock, ready_at: Optional[int]) -> None:
        self.clock, self.ready_at, self.calls, self.events = clock, ready_at, 0, []

    def ready(self) -> Optional[int]:
        self.calls += 1
        self.events.append(("ready", self.clock.monotonic()))
        return self.calls if self.calls == self.ready_at else None

    def check(self) -> None:
        self.events.append(("check", self.clock.monotonic()))


@pytest.mark.timeout(10)
@pytest.mark.parametrize(("ready_at", "deadline_in", "expected", "calls"), [
    (1, None, 1, 1),  # ready at once: no sleep
    (4, None, 4, 4),  # no deadline: waits as long as it takes
    (3, 10.0, 3, 3),  # ready before the deadline
    (0, 0.25, None, 4),  # never ready: None after the round that finds the deadline passed (0, 0.1, 0.2, 0.3)
    (5, 0.25, None, 4),  # ready only after the deadline: never asked that late
])
def test_wait_until_returns_the_first_answer_or_none_at_the_deadline(ready_at, deadline_in, expected, calls) -> None:
    """The value, or None when the deadline passed first; `ready` is asked once per 0.1 s round."""
    clock = FakeClock()
    script = Script(clock, ready_at)
    deadline = None if deadline_in is None else clock.monotonic() + deadline_in
    assert (expected, calls) == (wait_until(script.ready, deadline, clock, 0.1), script.calls)


@pytest.mark.timeout(10)
def test_the_check_runs_before_every_round_and_a_raise_ends_the_wait() -> None:
    """check, ready, pause, check, ready...: a check that raises (a landed signal) ends the wait
    with its exception before `ready` is asked again."""
    clock = FakeClock()
    script = Script(clock, None)
    rounds = []

    def check() -> None:
        rounds.append(clock.monotonic() - 1000.0)
        script.check()
        if len(rounds) == 3:
            raise KeyboardInterrupt("signal")

    with pytest.raises(KeyboardInterrupt):
        wait_until(script.ready, None, clock, 0.5, check=check)
    assert ([0.0, 0.5, 1.0], ["check", "ready", "check", "ready", "check"]) == (
        rounds, [kind for kind, _time in script.events])


@pytest.mark.timeout(10)
def test_a_callable_poll_is_asked_each_round() -> None:
    """The readiness wait's pause grows with the replicas still waiting: the pause is asked anew
    every round."""
    clock = FakeClock()
    pauses = iter([0.1, 0.2, 0.4])
    script = Script(clock, 4)
    assert 4 == wait_until(script.ready, None, clock, lambda: next(pauses))
    assert [0.0, 0.1, 0.3, 0.7] == [round(t - 1000.0, 6) for _kind, t in script.events]
