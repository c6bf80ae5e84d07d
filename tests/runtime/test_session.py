"""The runtime's service objects take keyword arguments only, and the session never prints its secrets."""

from __future__ import annotations

import pytest

from dd_slurm.clock import Clock
from dd_slurm.runtime.cleanup import Cleanup
from dd_slurm.runtime.session import Session
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.step_runner import StepRunner
from dd_slurm.scheduler.commands import SlurmCommands
from tests.runtime.harness import plan_data, stage_plan


@pytest.mark.parametrize("service", [Session, StepRunner, Cleanup], ids=lambda s: s.__name__)
def test_service_objects_take_keywords_only(service: type) -> None:
    """A positional argument is refused: callers name every value they pass."""
    with pytest.raises(TypeError) as refused:
        service("/tmp/attempt")
    assert "positional argument" in str(refused.value)


def test_a_session_prints_neither_its_key_nor_forwarded_values(tmp_path) -> None:
    """repr(session) (in a traceback, a debugger, a log line) shows no attempt key and no value of
    the supervisor's environment."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    clock = Clock()
    session = Session(attempt_dir=staged.attempt_dir, bundle_digest=staged.bundle_digest,
                      plan_digest=staged.plan_digest, environ={"HF_TOKEN": "hf-secret-value"}, clock=clock,
                      gate=SignalGate(), commands=SlurmCommands(clock, None, {}, timeout_s=1))
    shown = repr(session)
    assert (False, False) == (session.api_key in shown, "hf-secret-value" in shown)
