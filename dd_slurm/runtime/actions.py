"""The named actions the attempt machine calls (see machine/table.py), wiring the runtime pieces.
Launch actions return at once; guards wait against absolute deadlines and raise AttemptFailure."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from types import ModuleType
from typing import Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.plan.placement import Placed
from dd_slurm.runtime import gateway_step, images, staging, verify, waits
from dd_slurm.runtime.budget import budget_for
from dd_slurm.runtime.context import Allocation
from dd_slurm.runtime.endpoints import endpoint_map, publish
from dd_slurm.runtime.fleet import Fleet, identity_prover
from dd_slurm.runtime.launches import Launches
from dd_slurm.runtime.node.stepexec import probe_answer, read_json
from dd_slurm.runtime.probes import probe_health
from dd_slurm.runtime.replica_checks import PROBE_THREADS, each, unproven
from dd_slurm.runtime.results import keep_partial, validate_result, with_images
from dd_slurm.runtime.session import NotPrepared, Session
from dd_slurm.runtime.step_specs import StepSpec
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.readiness import Readiness, probe_summary

READY_POLL_MIN_S, READY_POLL_MAX_S = 0.01, 0.05
READY_POLL_PER_REPLICA_S = 0.002
PROBE_STEP = "probe"
PROBE_TIMEOUT_S = 60.0
LOCAL_PROBE_POLL_S = 0.001  # the supervisor's own node: a few stat()s and binds, ~1 ms
GATEWAY_POLL_S = 0.002  # from the config written to the gateway serving: ~10 ms on the path to the client
PREFLIGHT_TIMEOUT_S = 600.0
SETTLE_S = 0.3
PARTIAL_RESERVE_S = 1.0  # of cleanup's budget, kept for journaling `done` after the partial result
WITHDRAW_WAIT_S = 2.0  # held steps never released, at cleanup: end of input, then cleanup stops any left


def readiness_poll_s(waiting: int) -> float:
    """The pause between readiness rounds, each of which probes every waiting replica: 10 ms for a
    few, growing to 50 ms for 25 or more, so probing stays a small share of the supervisor's time."""
    return min(READY_POLL_MAX_S, max(READY_POLL_MIN_S, READY_POLL_PER_REPLICA_S * waiting))


def cleanup_module() -> ModuleType:
    """runtime/cleanup.py and its report's converter: a sixth of the supervisor's imports, needed
    only once cleanup runs; imported at the first need or while the servers load, whichever is first."""
    from dd_slurm.runtime import cleanup

    return cleanup


class RuntimeActions:
    """The session, the deployment steps started, the readiness record, and what the actions
    learn on the way (ports, deadlines, the gateway's address)."""

    def __init__(self, session: Session, verified_bundle: Optional[tuple[str, str]] = None,
                 local_probe: Callable[[dict, str, Mapping[str, str]], dict] = probe_answer,
                 replica_event: Callable[..., None] = lambda trigger, **fields: None) -> None:
        self.session = session
        self.replica_event = replica_event  # the attempt's: journals a replica event (table.REPLICA_EVENTS)
        self._fleet: Optional[Fleet] = None
        self._readiness: Optional[Readiness] = None  # created by ensure_readiness, once prepared
        self.launches = Launches(session, self._port_known)  # the deployment steps, their ports and leaders
        self.verified_bundle = verified_bundle  # (dir, digest) the entry point verified in this process
        self.local_probe = local_probe  # this node's probe answer (request, node, environment)
        self.deadlines: dict[str, float] = {}  # replica name -> monotonic readiness deadline
        self.gateway_base: Optional[str] = None  # e.g. "http://127.0.0.1:PORT" once a gateway serves
        self.client_deadline: Optional[float] = None
        self.probe_deadline: Optional[float] = None
        self.staging_started = 0.0  # when the weights' staging step started (monotonic)
        self._identity_batches = 0  # identity-<n>: the on-node identity checks so far

    # staged -> verified
    def inputs_verified(self) -> bool:
        s = self.session
        if not verify.verified_by_entry(self.verified_bundle, s.bundle_dir, s.bundle_digest):
            verify.check_bundle(s.bundle_dir, s.bundle_digest)
        plan = s.checked_plan()
        alloc = Allocation.from_environ(s.ambient)
        verify.check_gpu_shape(plan, alloc)
        verify.check_hosts(alloc.nodes)
        verify.check_paths(s.workspace, s.dir, s.results_dir, s.dir / files.LOGS_DIR)
        used = images.check_images(plan, s.workspace / files.IMAGE_DIGESTS, s.gate.check)
        if used:
            images.write_used(s.dir, used)
        s.prepare()
        self.ensure_readiness()
        self.publish("planned")
        return True

    # verified -> preflight -> deploying: the node probe and the client's preflight side by side
    def launch_probe(self) -> None:
        """Every node's GPUs, every step's program, every fixed port free: one step on the other
        nodes; this node is checked from here in preflights_passed (the batch step holds the
        job's GPUs on it, as a probe step would), without an srun beside the preflight's."""
        s, p = self.session, self.session.prepare()
        request, passed = s.write_probe_request()
        s.gate.check()
        self.probe_deadline = s.clock.monotonic() + PROBE_TIMEOUT_S
        remote = tuple(n for n in p.alloc.nodes if n != s.ambient.get("SLURMD_NODENAME"))
        if remote:
            p.runner.start_on_nodes(remote, ["_probe", str(request)], PROBE_STEP, role="probe",
                                    gres_gpus=p.plan.job.gpus_per_node, passed=passed)

    def launch_staging(self) -> None:
        self.staging_started = self.session.clock.monotonic()
        staging.launch(self.session)

    def launch_preflight(self) -> None:
        p = self.session.prepare()
        self.ensure_readiness()
        if p.plan.client.preflight_argv:
            self._start(self.session.client_spec(True))

    def preflights_passed(self) -> bool:
        """The probe's verdict first (a probe failure explains a preflight that could not start),
        then the client's preflight."""
        answers = self._probe_answers()
        verify.check_probes(answers, self.session.prepared.plan, self.session.prepared.alloc.nodes)
        if "preflight" in self.session.table.procs:
            limit = self.session.prepared.plan.client.timeout_s or PREFLIGHT_TIMEOUT_S
            code = self._wait_exit("preflight", self.session.clock.monotonic() + limit, "preflight_timeout")
            if code != 0:
                raise waits.unless_signalled(self.session, AttemptFailure(
                    "preflight_failed", f"client preflight exited {code}; see {files.log_ref('preflight')}"))
        staging.await_copies(self.session, self.staging_started, self.check_alive, self.replica_event)
        return True

    def _probe_answers(self) -> dict[str, dict]:
        """This node's probe answer, and the probe step's answers for the others once it has exited
        (at its deadline it is stopped and the answers that arrived are used)."""
        s = self.session
        here = s.ambient.get("SLURMD_NODENAME")
        answers: dict[str, dict] = {}
        if PROBE_STEP in s.table.procs:
            waits.wait_exit(s, PROBE_STEP, self.probe_deadline, self.check_alive)
            answers, problem = s.prepared.runner.node_answers(PROBE_STEP, s.clock.monotonic())
            if problem and not answers:
                raise AttemptFailure("probe_failed", problem)
        if here in s.prepared.alloc.nodes:
            local = self._probe_here(here)
            if local is not None:
                answers[here] = local
        return answers

    def _probe_here(self, here: str) -> Optional[dict]:
        """This node's answer, worked out in a daemon thread: a lookup that hangs (a stale mount
        under a program's path, a stalled resolver) ends at the probe's deadline, as a probe step
        would (None: the node did not answer), and a signal still decides first."""
        s = self.session
        request = read_json(str(files.probe_request(s.dir)))
        return waits.wait_in_thread(s, lambda: self.local_probe(request, here, s.ambient), self.probe_deadline,
                                    LOCAL_PROBE_POLL_S)

    def launch_deployments(self) -> None:
        """Every replica's steps, held (runtime/launches.py): no server program starts before release_deployments."""
        self.launches.launch_held()

    # preflight -> deploying
    def release_deployments(self) -> None:
        """The preflights passed: every held step goes on, and each replica's readiness deadline starts."""
        s, p = self.session, self.session.prepared
        s.gate.check()
        self.launches.release()
        with self.readiness.batch():
            for unit in p.placement:
                timeout = p.deployment(unit.deployment).ready_timeout_s
                self.deadlines[unit.name] = s.clock.monotonic() + timeout
                self.readiness.move(unit.name, "starting", deadline=s.clock.wall() + timeout)

    # deploying -> ready
    def deployments_ready(self) -> bool:
        """Every round: probe all waiting replicas side by side; confirm the identity of all that
        answered healthy in one on-node step; lose (or fail on) a replica past its deadline."""
        s, p = self.session, self.session.prepared
        waiting = [u for u in p.placement if self.readiness.state(u.name) != "ready" and not self.fleet.lost(u.name)]
        cleanup_module()  # imported while the servers load (the supervisor waits anyway), not before they start
        if waiting:
            with ThreadPoolExecutor(PROBE_THREADS) as pool:
                waits.wait_until(lambda: self._readiness_round(waiting, pool), None, s.clock,
                                 lambda: readiness_poll_s(len(waiting)), check=self._signal_or_exit)
        s.gate.check()
        return True

    def _readiness_round(self, waiting: list[Placed], pool: Executor) -> Optional[bool]:
        """One round: the replicas that became ready leave `waiting`; True once none is left."""
        with self.readiness.batch():
            healthy = self._healthy(waiting, pool)
            self._confirm_identities(healthy, pool)
            done = {u.name for u in healthy}
            waiting[:] = [u for u in waiting if u.name not in done and not self.fleet.lost(u.name)]
            self._past_deadline(waiting)
            waiting[:] = [u for u in waiting if not self.fleet.lost(u.name)]
        return None if waiting else True

    def _past_deadline(self, waiting: list[Placed]) -> None:
        now = self.session.clock.monotonic()
        late = next((u for u in waiting if now > self.deadlines[u.name]), None)
        if late is not None:
            timeout = self.session.deployment(late.deployment).ready_timeout_s
            probe = probe_summary(self.readiness.last_probe(late.name)) or "no probe answered"
            if self.session.deployment(late.deployment).min_replicas is not None:
                self.fleet.lose(late.name, "readiness_timeout", f"not healthy within {timeout:g}s (last probe: {probe})")
                return
            self.readiness.move(late.name, "failed", detail=f"not healthy before ready_timeout_s (last probe: {probe})")
            raise AttemptFailure("readiness_timeout", f"{late.name} not healthy within {timeout:g}s (last probe: "
                                 f"{probe}); see {files.log_ref(files.deploy_step(late.name))}", outcome="timed_out")

    # deploying, ready -> client: the gateway in front of every replica
    def launch_gateway(self) -> None:
        """Started while the servers load; it serves nothing until route_gateway writes its config."""
        s, p = self.session, self.session.prepared
        gateway_step.withdraw_config(s.dir)
        self._start(gateway_step.gateway_spec(p.plan, p.alloc.batch_node, s.layout, p.runner.interpreter,
                                              p.runner.entry, s.dir / files.GATEWAY_CONFIG))

    def route_gateway(self) -> None:
        """The routes first (lost replicas out of rotation from the gateway's first request), then
        its config: every replica whose address is known."""
        p = self.session.prepared
        self.fleet.serve([u.name for u in p.placement])
        gateway_step.write_config(p.plan, p.placement, self.replica_urls(), self.session.dir)

    def gateway_serving(self) -> bool:
        s, runner = self.session, self.session.prepared.runner
        self.gateway_base = waits.wait_until(
            lambda: gateway_step.served_base(s.dir, runner.started(gateway_step.GATEWAY_STEP)),
            s.clock.monotonic() + gateway_step.START_TIMEOUT_S, s.clock, GATEWAY_POLL_S, check=self._signal_or_exit)
        if self.gateway_base is None:
            raise AttemptFailure("gateway_failed", f"the gateway did not serve within {gateway_step.START_TIMEOUT_S:g}s; "
                                 f"see {files.log_ref(gateway_step.GATEWAY_STEP)}")
        return True

    def publish_endpoints(self) -> None:
        self.publish("ready")
        self.readiness.endpoints("published")

    # ready -> client -> finalize
    def launch_client(self) -> None:
        s, client = self.session, self.session.prepared.plan.client
        self._start(s.client_spec(False))
        if client.timeout_s:
            self.client_deadline = s.clock.monotonic() + client.timeout_s

    def client_succeeded(self) -> bool:
        code = self._wait_exit("client", self.client_deadline, "client_timeout")
        if code != 0:
            waits.check_gateway_alive(self.session, SETTLE_S)  # a stalled replica ends the gateway, then the client's requests
            raise waits.unless_signalled(self.session,
                AttemptFailure("client_failed", f"client exited {code}; see {files.log_ref('client')}"))
        self.check_alive()  # what ended in the same instant as the client (a stall found 20 ms before) decides too
        gateway_step.check_not_stalled(self.session.dir)
        return True

    # finalize -> cleanup
    def results_valid(self) -> bool:
        s = self.session
        manifest = validate_result(s.results_dir, s.prepared.plan.client.result, s.shard)
        write_json_atomic(self.session.dir / files.RESULT_MANIFEST, with_images(manifest, s.dir))
        return True

    def run_cleanup(self, outcome: str, reason: str) -> None:
        s = self.session
        p = s.prepared_or_none()  # None when preparation failed: cleanup still stops what this process started
        phases = [["client", "preflight", PROBE_STEP], [gateway_step.GATEWAY_STEP], list(reversed(self.launches.started))]
        grace = s.cleanup_grace_s(default=10.0)
        held = self.launches.started and not self.launches.released  # held steps end by end of input, started nothing
        if p is not None and held:
            p.runner.withdraw(list(self.launches.started), s.clock.monotonic() + WITHDRAW_WAIT_S)
        nodes = p.alloc.nodes if p is not None else ()
        module = cleanup_module()
        drain = module.drain_for(p, s.table, reason)
        cleanup = module.Cleanup(
            attempt_dir=s.dir, table=s.table, runner=p.runner if p is not None else None, clock=s.clock, grace_s=grace,
            nodes=nodes, attempt_id=s.attempt_id, signal_steps=s.signal_steps, finish_readiness=self._finish_readiness,
            here=s.ambient.get("SLURMD_NODENAME"),
            budget=budget_for(s, reason, grace, drain.seconds if drain else 0.0))
        client_ran = "client" in s.table.procs  # running at the stop, or just killed by the same signal from Slurm
        cleanup.run(phases, outcome, reason, drain)
        if reason in module.STOP_REASONS and client_ran and p is not None and p.plan.client.result.keep_partial:
            line = keep_partial(s.dir, s.results_dir, p.plan.client.result, s.shard,
                                lambda: cleanup.left() <= PARTIAL_RESERVE_S)
            print(line, file=sys.stderr, flush=True)

    # what every wait checks, and the readiness record
    def check_alive(self) -> None:
        """A released deployment step that exited, or a gateway that ended, is a failure now. Held
        steps count once released: before, the probe's and the preflight's verdicts come first."""
        if self.launches.released:
            self.fleet.check()
        waits.check_gateway_alive(self.session)

    def _signal_or_exit(self) -> None:
        self.session.gate.check()
        self.check_alive()

    def _wait_exit(self, name: str, deadline: Optional[float], timeout_reason: str) -> int:
        code = waits.wait_exit(self.session, name, deadline, self.check_alive)
        if code is None:
            raise AttemptFailure(timeout_reason, f"{name} still running at its deadline")
        return code

    def ensure_readiness(self) -> Readiness:
        if self._readiness is None:
            self._readiness = Readiness.new(self.session.dir, self.session.attempt_id, self.session.readiness_entries())
        return self._readiness

    @property
    def fleet(self) -> Fleet:
        """The replicas while they serve (runtime/fleet.py), once prepared."""
        if self._fleet is None:
            launches = self.launches
            self._fleet = Fleet(self.session, self.readiness, launches.started, launches.ports, self.replica_event,
                                lambda: self.publish("ready" if self.gateway_base else "planned"),
                                identity_prover(self.session, launches.ports, self._next_identity_batch, launches.leaders),
                                launches.relaunch, launches.port)
        return self._fleet

    def _next_identity_batch(self) -> str:
        self._identity_batches += 1
        return f"identity-{self._identity_batches}"

    @property
    def readiness(self) -> Readiness:
        """The readiness record; NotPrepared before ensure_readiness has created it."""
        if self._readiness is None:
            raise NotPrepared(f"attempt {self.session.attempt_id}: readiness used before ensure_readiness()")
        return self._readiness

    # helpers
    def _start(self, spec: StepSpec) -> None:
        self.launches.start(spec)

    def replica_urls(self) -> dict[str, str]:
        """Replica name -> its base URL, for every replica whose port is known (all of them once
        deployments_ready has passed): what a gateway routes each alias to."""
        placement = self.session.prepared.placement
        ports = {u.name: self.launches.ports.get(u.name, u.port) for u in placement}
        return {u.name: f"http://{u.leader}:{ports[u.name]}/v1" for u in placement if ports[u.name] is not None}

    def publish(self, state: str) -> None:
        """endpoints.json from what is known now; with `gateway_base` set, each alias's `url` is
        the gateway's (endpoints.logical_url)."""
        p = self.session.prepared
        states = self._fleet.states if self._fleet is not None else {}
        publish(self.session.dir / files.ENDPOINTS,
                endpoint_map(p.plan, p.placement, self.replica_urls(), state, self.gateway_base, states))

    def _healthy(self, waiting: list[Placed], pool: Executor) -> list[Placed]:
        """The waiting replicas whose port is known and whose health path answers now (all probed
        side by side): 200, or 401 when the attempt has a key. These probes never carry the key;
        it goes only to ports the identity check proved ours (replica_checks.proven_problem)."""
        s = self.session
        known = [(u, port) for u in waiting if (port := self.launches.port(u)) is not None]
        probes = each(pool, lambda up: probe_health(up[0].leader, up[1], s.deployment(up[0].deployment).health_path,
                                                    withheld_key=s.api_key), known)
        for (unit, _port), probe in zip(known, probes):
            self.readiness.note_probe(unit.name, {**probe, "time": s.clock.wall()})
        return [unit for (unit, _port), probe in zip(known, probes) if probe["ok"]]

    def _port_known(self, unit: Placed, port: int) -> None:
        self.readiness.move(unit.name, "starting", port=port, base_url=f"http://{unit.leader}:{port}/v1")

    def _confirm_identities(self, units: list[Placed], pool: Executor) -> None:
        """Ready once proven ours (replica_checks.unproven, one on-node step for all); else server_identity."""
        if not units:
            return
        try:
            failed = unproven(self.session, units, self.launches.ports, pool, self._next_identity_batch(),
                              self.launches.leaders)
        except ValueError as err:
            raise AttemptFailure("launch_failed", str(err)) from None
        if failed is not None:
            self._identity_failed(failed[0], self.launches.ports[failed[0].name], failed[1])
        for unit in units:
            port = self.launches.ports[unit.name]
            url = f"http://{unit.leader}:{port}/v1"
            self.readiness.move(unit.name, "ready", ready=[url], base_url=url, port=port)

    def _identity_failed(self, unit: Placed, port: int, detail: str) -> None:
        waits.wait_for_signal(self.session)  # a server gone between health and the check may be scancel's doing
        self.readiness.move(unit.name, "failed", detail=detail)
        raise AttemptFailure("server_identity", f"{unit.name}: port {port} on {unit.leader}: {detail}")

    def _finish_readiness(self) -> None:
        readiness = self._readiness or Readiness.left_by_earlier_run(self.session.dir)
        if readiness is not None:
            readiness.finish()
        p = self.session.prepared_if_any
        if p is not None and p.placement and (self.session.dir / files.ENDPOINTS).exists():
            self.publish("withdrawn")
