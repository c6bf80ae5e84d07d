"""The replicas while they serve: each is `serving`, `ejected` or `lost` (see the README's
"Losing a replica"). A replica is lost when one of its steps exits, when it stalls (the gateway
took it out), or when it misses its ready deadline; its other steps are stopped as cleanup would
(SIGTERM through Slurm, SIGKILL after the grace), and the attempt goes on while its deployment keeps
`min_replicas` replicas that are not lost. With `min_replicas` null any loss fails the attempt with
the cause's own reason, as before. An ejected replica (the gateway's doing) is probed with a
back-off and readmitted once it is healthy and proven ours; never while one of its steps is gone.

The supervisor's word reaches the gateway through gateway-routes.json (this module is its only
writer); each change is a journal event and a new endpoints.json."""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.plan.placement import Placed
from dd_slurm.runtime import gateway_step
from dd_slurm.runtime.probes import probe_health
from dd_slurm.runtime.replicas import exit_reason
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic

if TYPE_CHECKING:
    from dd_slurm.runtime.session import Session
    from dd_slurm.runtime.step_specs import StepSpec
    from dd_slurm.store.readiness import Readiness

ROUTES_SCHEMA = 1
GATEWAY_LOOK_S = 0.2  # how often the gateway's state file is read for stalls and ejections
PROBE_BACKOFF_S = (1.0, 30.0)  # an ejected replica's health probes: first after 1 s, doubling to 30 s
STOP_SCANCEL_S = 2.0


class Fleet:
    """`event(trigger, **fields)` journals a replica event; `publish()` rewrites endpoints.json;
    `prove(unit)` answers why the unit's listener is not ours (None: it is); `relaunch(unit, n)`
    starts the unit's steps again (its n-th restart) through the step runner; `port(unit)` is its
    current port once known (None before)."""

    def __init__(self, session: Session, readiness: Readiness, started: Mapping[str, StepSpec],
                 ports: Mapping[str, int], event: Callable[..., None], publish: Callable[[], None],
                 prove: Callable[[Placed], Optional[str]], relaunch: Callable[[Placed, int], None] = lambda u, n: None,
                 port: Callable[[Placed], Optional[int]] = lambda u: None) -> None:
        self.session, self.readiness, self.started, self.ports = session, readiness, started, ports
        self.event, self.publish, self.prove, self.relaunch, self.port = event, publish, prove, relaunch, port
        self.units = {u.name: u for u in session.prepared.placement}
        self.states: dict[str, str] = {}  # unit -> serving | ejected | restarting | lost (absent: not serving yet)
        self.restarts: dict[str, int] = {}  # unit -> restarts so far
        self.due: dict[str, float] = {}  # restarting unit -> monotonic time its steps start again
        self.waiting: dict[str, float] = {}  # restarted unit -> monotonic deadline to be ready
        self.retired: set[str] = set()  # steps of a restarted replica's earlier runs
        self.relaunched: dict[str, float] = {}  # restarted unit -> wall time its new steps started
        self.stopping: dict[str, float] = {}  # lost unit -> monotonic time of its SIGKILL
        self.readmits: dict[str, int] = {}
        self.probes: dict[str, tuple[float, float]] = {}  # ejected unit -> (next probe, back-off)
        self.looked = float("-inf")

    # what the actions ask
    def lost(self, name: str) -> bool:
        return self.states.get(name) == "lost"

    def state(self, name: str) -> Optional[str]:
        return self.states.get(name)

    def serve(self, names: list[str]) -> None:
        """These replicas are in rotation from now on (at `ready`)."""
        self.states.update({n: "serving" for n in names if not self.lost(n)})
        self.write_routes()

    def check(self) -> None:
        """Every poll: a step that exited loses its replica (or fails the attempt); now and then
        the gateway's stalls and ejections, the readmission probes, and the lost replicas' stops."""
        self._exited_steps()
        now = self.session.clock.monotonic()
        if now - self.looked >= GATEWAY_LOOK_S:
            self.looked = now
            self._gateway_out()
            self._probe_ejected(now)
            self._tend_restarts(now)
        self._tend_stops(now)

    def lose(self, name: str, reason: str, detail: str) -> None:
        """`name` is lost: out of rotation, its steps stopped; AttemptFailure when its deployment
        may not lose it (min_replicas null: `reason`; too few left: replicas_below_min)."""
        unit = self.units[name]
        deployment = self.session.deployment(unit.deployment)
        if self._fatal(name):
            raise AttemptFailure(reason, detail)
        restart = self.restarts.get(name, 0) < (deployment.restart.max if deployment.restart else 0)
        self.states[name] = "restarting" if restart else "lost"
        self.probes.pop(name, None)
        self.waiting.pop(name, None)
        if self.readiness.state(name) in ("starting", "ready"):
            self.readiness.move(name, "lost", detail=f"{reason}: {detail}")
        self.write_routes()
        self.publish()
        self.event("lose_replica", replica=name, reason=reason, detail=detail,
                   restart_in_s=deployment.restart.backoff_s if restart and deployment.restart else None)
        self._stop(name)
        if restart and deployment.restart:
            self.due[name] = self.session.clock.monotonic() + deployment.restart.backoff_s
            return
        left = sum(1 for u in self.units.values() if u.deployment == unit.deployment and not self.lost(u.name))
        assert deployment.min_replicas is not None  # null with restarts spent raised above
        if left < deployment.min_replicas:
            raise AttemptFailure("replicas_below_min", f"{deployment.name}: {left} of {deployment.replicas} replicas "
                                 f"left, min_replicas {deployment.min_replicas} ({name}: {reason}: {detail})")

    # steps
    def _exited(self) -> list[str]:
        return [n for n, spec in self.started.items() if n not in self.retired and not self.lost(spec.unit)
                and spec.unit not in self.due and self.session.table.poll(n) is not None]

    def _fatal(self, name: str) -> bool:
        """Losing `name` fails the attempt with the cause's reason: min_replicas null, no restart left."""
        deployment = self.session.deployment(self.units[name].deployment)
        return deployment.min_replicas is None and self.restarts.get(name, 0) >= (
            deployment.restart.max if deployment.restart else 0)

    def _exited_steps(self) -> None:
        """A step that exited: its replica is lost. When a follower and its leader are both gone
        (looked at again after the signal grace), the follower is the cause: a leader exits on losing a rank."""
        if not self._exited():
            return
        from dd_slurm.runtime.waits import wait_for_signal

        wait_for_signal(self.session)  # scancel and the time limit signal the steps and the batch step at once
        exited = self._exited()
        spec = self.started[next((n for n in exited if self.started[n].rank > 0), exited[0])]
        code = self.session.table.procs[spec.name].exit_code
        ready = self.readiness.state(spec.unit) == "ready"
        reason = exit_reason(self.session.prepared.runner.started(spec.name), spec, ready)
        if self._fatal(spec.unit):
            self.readiness.move(spec.unit, "failed", detail=f"{spec.name} exited {code}")
        self.lose(spec.unit, reason, f"{spec.name} exited {code}; see {files.log_ref(spec.name)}")

    def _stop(self, name: str) -> None:
        """SIGTERM to the lost replica's live steps (through Slurm, else to srun's group); SIGKILL
        after the cleanup grace (`_tend_stops`)."""
        live = self._live_steps(name)
        signalled = set(self.session.signal_steps(live, "TERM", timeout_s=STOP_SCANCEL_S)) if live else set()
        for step in live:
            if step not in signalled:
                self.session.table.signal_group(step, signal.SIGTERM)
            self.session.table.procs[step].stop = "sigterm"
        self.stopping[name] = self.session.clock.monotonic() + self.session.cleanup_grace_s(default=10.0)

    def _tend_stops(self, now: float) -> None:
        for name, kill_at in list(self.stopping.items()):
            live = self._live_steps(name)
            if not live:
                del self.stopping[name]
            elif now >= kill_at:
                self.session.signal_steps(live, "KILL", timeout_s=STOP_SCANCEL_S)
                for step in live:
                    self.session.table.signal_group(step, signal.SIGKILL)
                del self.stopping[name]  # cleanup's scan finds anything that outlived a SIGKILL

    def _live_steps(self, name: str) -> list[str]:
        return [n for n, spec in self.started.items() if spec.unit == name and self.session.table.poll(n) is None]

    # restarts in place
    def _tend_restarts(self, now: float) -> None:
        for name, due in list(self.due.items()):
            if now >= due and not self._live_steps(name):  # its GPUs and port are free again
                del self.due[name]
                self.retired.update(n for n, spec in self.started.items() if spec.unit == name)
                self.restarts[name] = self.restarts.get(name, 0) + 1
                timeout = self.session.deployment(self.units[name].deployment).ready_timeout_s
                self.readiness.move(name, "starting", deadline=self.session.clock.wall() + timeout, port=None,
                                    base_url=None, ready=[])
                self.relaunch(self.units[name], self.restarts[name])
                self.waiting[name] = now + timeout
                self.relaunched[name] = self.session.clock.wall()
        for name, deadline in list(self.waiting.items()):
            self._ready_again(name, now, deadline)

    def _ready_again(self, name: str, now: float, deadline: float) -> None:
        """A restarted replica: serving once healthy and proven ours; lost again past its deadline."""
        unit = self.units[name]
        port = self.port(unit)
        if port is not None and self._healthy(name) and self.prove(unit) is None:
            del self.waiting[name]
            url = f"http://{unit.leader}:{port}/v1"
            self.readiness.move(name, "ready", ready=[url], base_url=url, port=port)
            self.states[name] = "serving"
            self.write_routes()
            self.publish()
            self.event("restart_replica", replica=name, restart=self.restarts[name],
                       relaunched_at=self.relaunched.get(name), url=url)
        elif now > deadline:
            timeout = self.session.deployment(unit.deployment).ready_timeout_s
            self.lose(name, "readiness_timeout", f"restarted, not healthy within {timeout:g}s")

    # the gateway's view
    def _gateway_out(self) -> None:
        out = gateway_step.state_of(self.session.dir).get("out")
        if not isinstance(out, dict):
            return
        for gateway_name, entry in out.items():
            name = gateway_name.replace("/", "-")
            if not isinstance(entry, dict) or name not in self.units or self.states.get(name) != "serving":
                continue
            if entry.get("why") == "stalled":
                self.lose(name, "server_stalled", f"{name} had requests in flight and made no progress for "
                          f"stall_timeout_s; the gateway took it out")
            elif entry.get("why") == "ejected" and type(entry.get("ejections")) is int:
                self._ejected(name, entry["ejections"])

    def _ejected(self, name: str, ejections: int) -> None:
        if self.readmits.get(name, 0) >= ejections:
            return  # readmitted already; the gateway has not read the routes yet
        self.states[name] = "ejected"
        self.probes[name] = (self.session.clock.monotonic() + PROBE_BACKOFF_S[0], PROBE_BACKOFF_S[0])
        self.readmits[name] = ejections - 1
        self.publish()
        self.event("eject_replica", replica=name, ejections=ejections)

    def _probe_ejected(self, now: float) -> None:
        for name, (due, backoff) in list(self.probes.items()):
            if now < due or self._live_steps(name) != [n for n, s in self.started.items()
                                                       if s.unit == name and n not in self.retired]:
                continue  # not yet, or a step is gone (the next check loses it): never readmitted
            if self._healthy(name) and self.prove(self.units[name]) is None:
                del self.probes[name]
                self.states[name] = "serving"
                self.readmits[name] += 1
                self.write_routes()
                self.publish()
                self.event("readmit_replica", replica=name)
            else:
                wait = min(PROBE_BACKOFF_S[1], backoff * 2)
                self.probes[name] = (now + wait, wait)

    def _healthy(self, name: str) -> bool:
        unit, s = self.units[name], self.session
        port = self.ports.get(name, unit.port)
        if port is None:
            return False
        probe = probe_health(unit.leader, port, s.deployment(unit.deployment).health_path, withheld_key=s.api_key)
        return bool(probe.get("ok"))

    # the routes file
    def write_routes(self) -> None:
        replicas: dict[str, Any] = {}
        for name, unit in self.units.items():
            port = self.ports.get(name, unit.port)
            if port is None or name not in self.states:
                continue
            state = self.states[name] if self.states[name] in ("lost", "restarting") else "serving"
            replicas[f"{unit.deployment}/{unit.replica}"] = {
                "state": state, "base_url": f"http://{unit.leader}:{port}/v1", "readmit": max(0, self.readmits.get(name, 0))}
        write_json_atomic(self.session.dir / files.GATEWAY_ROUTES, {"schema": ROUTES_SCHEMA, "replicas": replicas},
                          mode=0o644)


def identity_prover(session: Session, ports: Mapping[str, int], batch: Callable[[], str],
                    leaders: Mapping[str, StepSpec]) -> Callable[[Placed], Optional[str]]:
    """Why one replica's listener is not proven ours (None: it is), by the same check as at start-up
    (against its current leader step: a restarted replica's is a new one)."""
    from dd_slurm.runtime.replica_checks import unproven

    def prove(unit: Placed) -> Optional[str]:
        with ThreadPoolExecutor(1) as pool:
            try:
                failed = unproven(session, [unit], dict(ports), pool, batch(), leaders)
            except ValueError as err:
                return str(err)
        return None if failed is None else failed[1]

    return prove
