"""What one runtime process knows about its attempt: paths, the verified plan (read once, handed
on typed), the allocation, placement, the process table and the step runner."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Mapping, Optional

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.clock import Clock
from dd_slurm.errors import DdSlurmError, VerificationError
from dd_slurm.plan import Plan
from dd_slurm.runtime import verify
from dd_slurm.runtime.context import Allocation
from dd_slurm.runtime.endpoints import ENDPOINTS_NAME
from dd_slurm.runtime.launch import StepRunner
from dd_slurm.runtime.placement import Placed, place
from dd_slurm.runtime.processes import ProcessTable
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.steps import DEFAULT_PATH, Layout
from dd_slurm.scheduler.render import interpreter
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.attempt_record import read_record


class Session:
    def __init__(self, attempt_dir: Path, bundle_digest: str, plan_digest: str, environ: Mapping[str, str],
                 clock: Clock, gate: SignalGate, commands: object) -> None:
        self.dir = Path(attempt_dir).resolve()
        self.attempt_id = self.dir.name
        self.workspace = self.dir.parent.parent
        self.bundle_digest, self.plan_digest = bundle_digest, plan_digest
        self.bundle_dir = Path(read_record(self.dir)["bundle_dir"])
        self.results_dir = self.dir / "results"
        self.ambient = dict(environ)
        self.clock, self.gate, self.commands = clock, gate, commands
        self.table = ProcessTable(self.dir, clock)
        self.layout = Layout(self.attempt_id, str(self.dir), str(self.dir / ENDPOINTS_NAME), str(self.results_dir))
        self.plan: Optional[Plan] = None
        self.alloc: Optional[Allocation] = None
        self.placement: dict[str, Placed] = {}
        self.runner: Optional[StepRunner] = None

    def prepare(self) -> None:
        """Plan (digest-checked), allocation, placement, runner; idempotent, so a fresh process
        resuming the attempt gets the same view."""
        if self.runner is not None:
            return
        if self.plan is None:
            self.plan = verify.check_plan(self.dir / "plan.json", self.plan_digest)
        if self.alloc is None:
            self.alloc = Allocation.from_environ(self.ambient)
        self.place()
        self.runner = StepRunner(self.table, self.clock, self.dir, self.srun(), self.alloc.job_id,
                                 interpreter(self.plan.runtime.python, entry_sha256(), self.bundle_digest),
                                 str(self.bundle_dir / "entry.py"), self.srun_env())

    def place(self) -> None:
        if not self.placement:
            self.placement = place(self.plan, self.alloc.nodes, self.alloc.gpus_per_node)

    def srun(self) -> str:
        bin_dir = self.ambient.get("DD_SLURM_BIN_DIR")
        found = str(Path(bin_dir) / "srun") if bin_dir else shutil.which("srun", path=self.srun_env()["PATH"])
        if not found or not os.access(found, os.X_OK):
            raise VerificationError("srun_missing", "srun not found (set DD_SLURM_BIN_DIR)")
        return found

    def srun_env(self) -> dict[str, str]:
        bin_dir = self.ambient.get("DD_SLURM_BIN_DIR")
        env = {"PATH": f"{bin_dir}:{DEFAULT_PATH}" if bin_dir else DEFAULT_PATH, "LC_ALL": "C",
               "DD_SLURM_ATTEMPT_ID": self.attempt_id}
        if self.ambient.get("SLURM_CONF"):
            env["SLURM_CONF"] = self.ambient["SLURM_CONF"]
        return env

    def write_probe_request(self) -> Path:
        nodes: dict[str, dict] = {n: {"ports": [], "executables": []} for n in self.alloc.nodes}
        for dep in self.plan.deployments:
            placed = self.placement[dep.name]
            nodes[placed.leader]["ports"].append(dep.port)
            for rank, node in enumerate(placed.nodes):
                argv = dep.argv if rank == 0 else dep.follower_argv
                nodes[node]["executables"].append(argv[0])
        for argv in (self.plan.client.argv, self.plan.client.preflight_argv):
            if argv:
                nodes[self.alloc.batch_node]["executables"].append(argv[0])
        path = self.dir / "steps" / "probe-request.json"
        path.parent.mkdir(exist_ok=True)
        write_json_atomic(path, {"nodes": nodes, "path": DEFAULT_PATH})
        return path

    def readiness_entries(self) -> dict[str, dict]:
        return {d.name: {"nodes": list(self.placement[d.name].nodes), "model_alias": d.model_alias,
                         "base_url": f"http://{self.placement[d.name].leader}:{d.port}/v1"}
                for d in self.plan.deployments}

    def signal_step(self, name: str, signal_name: str, timeout_s: Optional[float] = None) -> bool:
        """Signal a step's task through Slurm (scancel --signal); False if the step never started.
        `timeout_s` bounds the call (one try), for cleanup's budget."""
        record = self.runner.started(name) if self.runner else None
        if not (record and record.get("step_id") and record.get("job_id")):
            return False
        commands = self.commands.bounded(timeout_s) if timeout_s is not None else self.commands
        try:
            commands.cancel(f"{record['job_id']}.{record['step_id']}", signal=signal_name)
        except DdSlurmError:
            return False
        return True
