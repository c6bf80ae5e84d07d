"""The named actions the attempt machine calls (see machine/table.py), wiring the runtime pieces.
Launch actions return at once; guards wait against absolute deadlines and raise AttemptFailure."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime import verify
from dd_slurm.runtime.budget import budget_for
from dd_slurm.runtime.cleanup import Cleanup
from dd_slurm.runtime.context import Allocation
from dd_slurm.runtime.endpoints import ENDPOINTS_NAME, endpoint_map, publish
from dd_slurm.runtime.probes import probe_health
from dd_slurm.runtime.results import MANIFEST_NAME, validate_result
from dd_slurm.runtime.session import Session
from dd_slurm.runtime.steps import StepSpec, client_step, deployment_steps
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.readiness import Readiness

POLL_S = 0.05
PREFLIGHT_TIMEOUT_S = 600.0
SETTLE_S = 0.3


class RuntimeActions:
    def __init__(self, session: Session) -> None:
        self.s = session
        self.readiness: Optional[Readiness] = None
        self.started: dict[str, StepSpec] = {}  # deployment steps by name, in start order
        self.deadlines: dict[str, float] = {}
        self.client_deadline: Optional[float] = None

    # staged -> verified
    def inputs_verified(self) -> bool:
        s = self.s
        verify.check_bundle(s.bundle_dir, s.bundle_digest)
        s.plan = verify.check_plan(s.dir / "plan.json", s.plan_digest)
        s.alloc = Allocation.from_environ(s.ambient)
        verify.check_gpu_shape(s.plan, s.alloc)
        verify.check_hosts(s.alloc.nodes)
        verify.check_paths(s.workspace, s.dir, s.results_dir, s.dir / "logs")
        s.prepare()
        s.gate.check()
        answers, problem = s.runner.on_nodes(s.alloc.nodes, ["_probe", str(s.write_probe_request())], "probe", 60,
                                             role="probe", gres_gpus=s.plan.job.gpus_per_node)
        if problem and not answers:
            raise AttemptFailure("probe_failed", problem)
        verify.check_probes(answers, s.plan, s.alloc.nodes)
        self.ensure_readiness()
        publish(s.dir / ENDPOINTS_NAME, endpoint_map(s.plan, s.placement, "planned"))
        return True

    # verified -> preflight -> deploying
    def launch_preflight(self) -> None:
        self.s.prepare()
        self.ensure_readiness()
        self.s.gate.check()
        if self.s.plan.client.preflight_argv:
            self.s.runner.start(client_step(self.s.plan, self.s.alloc.batch_node, self.s.layout, self.s.ambient, True))

    def preflight_passed(self) -> bool:
        if "preflight" not in self.s.table.procs:
            return True
        limit = self.s.plan.client.timeout_s or PREFLIGHT_TIMEOUT_S
        code = self._wait_exit("preflight", self.s.clock.monotonic() + limit, "preflight_timeout")
        if code != 0:
            raise AttemptFailure("preflight_failed", f"client preflight exited {code}; see logs/preflight.log")
        return True

    def launch_deployments(self) -> None:
        s = self.s
        for dep in s.plan.deployments:
            for spec in deployment_steps(s.plan, dep, s.placement[dep.name], s.layout, s.ambient):
                s.gate.check()
                s.runner.start(spec)
                self.started[spec.name] = spec
            self.deadlines[dep.name] = s.clock.monotonic() + dep.ready_timeout_s
            self.readiness.move(dep.name, "starting", deadline=s.clock.wall() + dep.ready_timeout_s)

    # deploying -> ready
    def deployments_ready(self) -> bool:
        s = self.s
        waiting = [d for d in s.plan.deployments if self.readiness.state(d.name) != "ready"]
        while waiting:
            s.gate.check()
            self.check_alive()
            for dep in list(waiting):
                host = s.placement[dep.name].leader
                probe = probe_health(host, dep.port, dep.health_path)
                self.readiness.note_probe(dep.name, {**probe, "time": s.clock.wall()})
                if probe["ok"]:
                    url = f"http://{host}:{dep.port}/v1"
                    self.readiness.move(dep.name, "ready", ready=[url])
                    waiting.remove(dep)
                elif s.clock.monotonic() > self.deadlines[dep.name]:
                    self.readiness.move(dep.name, "failed", detail="not healthy before ready_timeout_s")
                    raise AttemptFailure("readiness_timeout", f"{dep.name} not healthy within {dep.ready_timeout_s:g}s",
                                         outcome="timed_out")
            if waiting:
                s.clock.sleep(POLL_S)
        s.gate.check()
        return True

    def publish_endpoints(self) -> None:
        publish(self.s.dir / ENDPOINTS_NAME, endpoint_map(self.s.plan, self.s.placement, "ready"))
        self.readiness.endpoints("published")

    # ready -> client -> finalize
    def launch_client(self) -> None:
        s = self.s
        s.gate.check()
        s.runner.start(client_step(s.plan, s.alloc.batch_node, s.layout, s.ambient, False))
        if s.plan.client.timeout_s:
            self.client_deadline = s.clock.monotonic() + s.plan.client.timeout_s

    def client_succeeded(self) -> bool:
        code = self._wait_exit("client", self.client_deadline, "client_timeout")
        if code != 0:
            raise AttemptFailure("client_failed", f"client exited {code}; see logs/client.log")
        return True

    # finalize -> cleanup
    def results_valid(self) -> bool:
        manifest = validate_result(self.s.results_dir, self.s.plan.client.result)
        write_json_atomic(self.s.dir / MANIFEST_NAME, manifest)
        return True

    def run_cleanup(self, outcome: str, reason: str) -> None:
        s = self.s
        try:
            s.prepare()
        except Exception:  # noqa: BLE001 - cleanup still stops what this process started
            pass
        phases = [["client", "preflight"], list(reversed(self.started))]
        grace = s.plan.runtime.cleanup_grace_s if s.plan else 10.0
        nodes = s.alloc.nodes if s.alloc else ()
        Cleanup(s.dir, s.table, s.runner, s.clock, grace, nodes, s.attempt_id, s.signal_step,
                self._finish_readiness, budget_for(s, reason, grace)).run(phases, outcome, reason)

    # helpers
    def ensure_readiness(self) -> None:
        if self.readiness is None:
            self.readiness = Readiness(self.s.dir, self.s.attempt_id, self.s.readiness_entries())

    def _finish_readiness(self) -> None:
        if self.readiness is not None:
            self.readiness.finish()

    def _wait_exit(self, name: str, deadline: Optional[float], timeout_reason: str) -> int:
        while True:
            self.s.gate.check()
            code = self.s.table.poll(name)
            if code is not None:
                return code
            self.check_alive()
            if deadline is not None and self.s.clock.monotonic() > deadline:
                raise AttemptFailure(timeout_reason, f"{name} still running at its deadline")
            self.s.clock.sleep(POLL_S)

    def check_alive(self) -> None:
        """A deployment step that exited is a failure now, not at a deadline. When a follower and
        its leader are both gone, the follower is the cause (the leader exits on losing a rank)."""
        exited = [n for n in self.started if self.s.table.poll(n) is not None]
        if not exited:
            return
        if not self.s.gate.received:  # scancel signals steps and batch at once: let ours land
            self.s.clock.sleep(SETTLE_S)
        self.s.gate.check()
        exited = [self.started[n] for n in self.started if self.s.table.poll(n) is not None]
        spec = next((step for step in exited if step.rank > 0), exited[0])
        code = self.s.table.procs[spec.name].exit_code
        reason = self._exit_reason(spec, self.readiness.state(spec.deployment) == "ready")
        self.readiness.move(spec.deployment, "failed", detail=f"{spec.name} exited {code}")
        raise AttemptFailure(reason, f"{spec.name} exited {code}; see logs/{spec.name}.log")

    def _exit_reason(self, spec: StepSpec, ready: bool) -> str:
        record = self.s.runner.started(spec.name)
        if record is None:
            return "launch_failed"
        if record.get("error"):
            return "executable_missing" if "not found" in record["error"] else "gpu_shape"
        if spec.rank > 0:
            return "follower_exited"
        return "server_crashed" if ready else "server_exited_while_loading"
