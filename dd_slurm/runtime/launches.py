"""The deployment steps' launches, and what they tell: each replica's port and current leader.

Every replica's steps launch held beside the preflight (srun, the launcher's start-up and its
bundle check overlap it; no server program starts before the release). Followers of a replica
whose port its leader chooses start once the leader has published it; container steps of a
deployment whose weights are staged start at the release (pyxis mounts the node's copy when the
step starts); a lost replica's steps start again in place, under new names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import attrs

from dd_slurm.errors import AttemptFailure
from dd_slurm.plan.placement import Placed
from dd_slurm.runtime import staging
from dd_slurm.runtime.replicas import published_port
from dd_slurm.runtime.session import Session
from dd_slurm.runtime.step_specs import StepSpec, needs_port, with_port


@attrs.define
class Launches:
    """`on_port(unit, port)`: told once when a replica's port becomes known."""

    session: Session
    on_port: Callable[[Placed, int], None]
    started: dict[str, StepSpec] = attrs.field(factory=dict)  # deployment steps by name, in start order
    released: bool = False  # whether the held steps were let go on
    deferred: dict[str, list[StepSpec]] = attrs.field(factory=dict)  # followers waiting for their leader's port
    after_staging: list[StepSpec] = attrs.field(factory=list)  # container steps mounting a weights copy
    ports: dict[str, int] = attrs.field(factory=dict)  # replica name -> its port (fixed, or published)
    leaders: dict[str, StepSpec] = attrs.field(factory=dict)  # replica name -> its leader step, once restarted

    def start(self, spec: StepSpec) -> None:
        """Every launch: a signal that has landed by now starts nothing."""
        self.session.gate.check()
        self.session.prepared.runner.start(spec, self.session.passed(spec))

    def _started(self, spec: StepSpec) -> None:
        self.start(spec)
        self.started[spec.name] = spec

    def launch_held(self) -> None:
        """Every replica's steps, held; multi-node replicas first (their followers wait on the leader)."""
        p = self.session.prepared
        for unit in sorted(p.placement, key=lambda u: -len(u.nodes)):
            for spec in p.specs[unit.name]:
                if needs_port(spec):
                    self.deferred.setdefault(unit.name, []).append(spec)
                elif staging.mounts_copy(spec, p.deployment(unit.deployment)):
                    self.after_staging.append(spec)
                else:
                    self._started(attrs.evolve(spec, held=True))

    def release(self) -> None:
        """The held steps go on; the steps that had to wait for the weights' copies start."""
        self.session.prepared.runner.release(list(self.started))
        self.released = True
        for spec in self.after_staging:
            self._started(spec)

    def relaunch(self, unit: Placed, restart: int) -> None:
        """The replica's steps again, in place (its GPUs, its node; a new port when automatic), as
        new steps named `<step>-r<restart>`; followers of an automatic port wait for the leader's."""
        self.ports.pop(unit.name, None)
        self.deferred.pop(unit.name, None)
        for spec in self.session.prepared.specs[unit.name]:
            name = f"{spec.name}-r{restart}"
            again = attrs.evolve(spec, name=name, held=False, env={**spec.env, "DD_SLURM_ROLE": name})
            if spec.rank == 0:
                self.leaders[unit.name] = again
            if needs_port(again):
                self.deferred.setdefault(unit.name, []).append(again)
            else:
                self._started(again)

    def port(self, unit: Placed) -> Optional[int]:
        """The replica's port: fixed, or once its leader's launcher has published it (validated);
        then its deferred followers start."""
        if unit.name in self.ports:
            return self.ports[unit.name]
        p = self.session.prepared
        leader = self.leaders.get(unit.name) or p.specs[unit.name][0]
        record = p.runner.started(leader.name)
        if record is None or record.get("error"):
            return None  # not started yet, or it failed and check_alive will say so
        try:
            port = published_port(record, leader)
        except ValueError as err:
            raise AttemptFailure("launch_failed", f"{leader.name}: its step record is not valid: {err}") from None
        self.ports[unit.name] = port
        self.on_port(unit, port)
        for spec in self.deferred.pop(unit.name, []):
            self._started(with_port(spec, port))
        return port
