"""What every guard of the attempt machine waits with: its processes, the readiness record and the
signals. A wait polls the process table against an absolute deadline; a deployment step or the
gateway that ended is a failure at once; a signal that has landed decides first."""

from __future__ import annotations

from typing import Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime import gateway_step
from dd_slurm.runtime.replicas import exit_reason
from dd_slurm.runtime.session import NotPrepared, Session
from dd_slurm.runtime.step_specs import StepSpec
from dd_slurm.store import attempt_files as files
from dd_slurm.store.readiness import Readiness

EXIT_POLL_S = 0.01  # waiting for one process to exit or to serve: a poll is one waitpid or one small read
SIGNAL_GRACE_S = 2.0


class Watching:
    """The base of RuntimeActions: the session, the deployment steps started, the readiness record."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._readiness: Optional[Readiness] = None  # created by ensure_readiness, once prepared
        self.started: dict[str, StepSpec] = {}  # deployment steps by name, in start order (held until released)
        self.released = False  # whether release_deployments has let the held steps go on

    def _let_signals_land(self) -> None:
        """Before calling a child's exit or absence a failure: scancel (and the time limit) signal
        the steps and the batch step at once, so our own signal gets up to SIGNAL_GRACE_S to
        land (under load, slurmstepd delivers them apart), and then wins."""
        deadline = self.session.clock.monotonic() + SIGNAL_GRACE_S
        while not self.session.gate.received and self.session.clock.monotonic() < deadline:
            self.session.clock.sleep(EXIT_POLL_S)
        self.session.gate.check()

    def _unless_signalled(self, failure: AttemptFailure) -> AttemptFailure:
        self._let_signals_land()
        return failure

    def ensure_readiness(self) -> Readiness:
        if self._readiness is None:
            self._readiness = Readiness.new(self.session.dir, self.session.attempt_id, self.session.readiness_entries())
        return self._readiness

    @property
    def readiness(self) -> Readiness:
        """The readiness record; NotPrepared before ensure_readiness has created it."""
        if self._readiness is None:
            raise NotPrepared(f"attempt {self.session.attempt_id}: readiness used before ensure_readiness()")
        return self._readiness

    def _wait_exit(self, name: str, deadline: Optional[float], timeout_reason: str) -> int:
        code = self._exit_by(name, deadline)
        if code is None:
            raise AttemptFailure(timeout_reason, f"{name} still running at its deadline")
        return code

    def _exit_by(self, name: str, deadline: Optional[float]) -> Optional[int]:
        """The exit code of `name`, or None when it still runs at `deadline`."""
        while True:
            self.session.gate.check()
            code = self.session.table.poll(name)
            if code is not None:
                return code
            self.check_alive()
            if deadline is not None and self.session.clock.monotonic() > deadline:
                return None
            self.session.clock.sleep(EXIT_POLL_S)

    def check_alive(self) -> None:
        """A deployment step that exited is a failure now, not at a deadline. When a follower and
        its leader are both gone, the follower is the cause (the leader exits on losing a rank).
        A gateway that ended (a stalled replica, or itself) fails the attempt likewise. Held steps
        count once released: before, the probe's and the preflight's verdicts come first."""
        if not self.released or not [n for n in self.started if self.session.table.poll(n) is not None]:  # polls every step
            self._gateway_ended()
            return
        self._let_signals_land()
        exited = [self.started[n] for n in self.started if self.session.table.poll(n) is not None]
        spec = next((step for step in exited if step.rank > 0), exited[0])
        code = self.session.table.procs[spec.name].exit_code
        reason = exit_reason(self.session.prepared.runner.started(spec.name), spec, self.readiness.state(spec.unit) == "ready")
        self.readiness.move(spec.unit, "failed", detail=f"{spec.name} exited {code}")
        raise AttemptFailure(reason, f"{spec.name} exited {code}; see {files.log_ref(spec.name)}")

    def _gateway_ended(self, wait_s: float = 0.0) -> None:
        """Raise the gateway's failure if it has exited (waiting up to `wait_s` for it to)."""
        if gateway_step.GATEWAY_STEP not in self.session.table.procs:
            return
        code = self.session.table.wait(gateway_step.GATEWAY_STEP, self.session.clock.monotonic() + wait_s)
        if code is not None:
            raise self._unless_signalled(gateway_step.exit_failure(self.session.dir, code))
