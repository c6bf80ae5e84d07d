"""The soak's oracle (tests/slurm/soak.py `expected`): what an attempt may end as, given its fault
and when the fault fired against the attempt's own records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.slurm.soak import Trial, expected

T0 = 1_800_000_000.0
JOURNAL = [("staged", "verified", 1.0), ("verified", "preflight", 1.1), ("preflight", "deploying", 1.5),
           ("deploying", "ready", 3.0), ("ready", "client", 3.5), ("client", "finalize", 5.0)]


def attempt(tmp_path: Path, batch_started: float | None) -> Path:
    """An attempt dir that succeeded: its journal, and the supervisor's record when it has one."""
    lines = [{"kind": "transition", "from": a, "to": b, "ts": T0 + t} for a, b, t in JOURNAL]
    lines.append({"kind": "transition", "from": "finalize", "to": "cleanup", "ts": T0 + 5.1,
                  "outcome": "succeeded", "reason": "ok"})
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if batch_started is not None:
        (tmp_path / "supervisor.json").write_text(json.dumps({"started_at": T0 + batch_started, "pid": 1}))
    return tmp_path


@pytest.mark.parametrize(("fault", "fired", "batch_started", "succeeded_allowed"), [
    ("usr1_batch", -0.6, 0.0, True),   # before the batch step existed: Slurm loses the signal
    ("usr1_batch", 0.2, 0.0, False),   # the batch step ran: the signal landed, so success is wrong
    ("usr1_batch", -0.6, None, False),  # no supervisor record: nothing to place the fault against
    ("scancel", -0.6, 0.0, False),     # a cancel of a started job ends it whether or not the batch step ran
])
def test_a_batch_signal_before_the_batch_step_may_be_dropped(tmp_path, fault, fired, batch_started,
                                                              succeeded_allowed) -> None:
    """Real Slurm (22.05, seen in the soak) loses `scancel --batch --signal=USR1` that reaches a job
    whose batch step has not launched yet; the oracle allows a success exactly then."""
    trial = Trial(index=0, fault=fault, moment="staged", delay_s=0.0,
                  attempt_dir=attempt(tmp_path, batch_started), fired_at=T0 + fired)
    assert succeeded_allowed == (("succeeded", "ok") in expected(trial))
