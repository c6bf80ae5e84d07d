"""What one runtime process knows about its attempt: paths, the verified plan (read once, handed
on typed), the allocation, placement of every replica, the step specs, the attempt's key (in
memory only), the process table and the step runner."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import attrs

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.clock import Clock
from dd_slurm.errors import DdSlurmError, VerificationError
from dd_slurm.plan.placement import Placed, place_replicas
from dd_slurm.plan.records import Deployment, Plan
from dd_slurm.runtime import verify
from dd_slurm.runtime.context import Allocation
from dd_slurm.runtime.process_table import ProcessTable
from dd_slurm.runtime.signals import SignalGate
from dd_slurm.runtime.step_runner import StepRunner, env_copy
from dd_slurm.runtime.step_specs import DEFAULT_PATH, Layout, StepSpec, client_step, passed_values, replica_steps, weights_path
from dd_slurm.scheduler.render import interpreter
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_json_atomic
from dd_slurm.store.attempt_record import read_record
from dd_slurm.store.run_shards import shard_of

if TYPE_CHECKING:
    from dd_slurm.runtime.budget import JobFacts
    from dd_slurm.scheduler.commands import SlurmCommands


@attrs.frozen(kw_only=True)
class Prepared:
    """What `Session.prepare()` builds once: the digest-checked plan, the allocation, every
    replica's placement, its steps (replica name -> steps, leader first) and the step runner."""

    plan: Plan
    alloc: Allocation
    placement: tuple[Placed, ...]
    specs: Mapping[str, list[StepSpec]]
    runner: StepRunner

    def deployment(self, name: str) -> Deployment:
        return next(d for d in self.plan.deployments if d.name == name)


class NotPrepared(RuntimeError):
    """A session's prepared values were used before `Session.prepare()` built them."""


def _resolved(path: str | Path) -> Path:
    return Path(path).resolve()


@attrs.define(kw_only=True, eq=False, repr=False)  # no repr: it holds the attempt key and forwarded values
class Session:
    """One runtime process's view of its attempt; `prepare()` builds the rest once."""

    dir: Path = attrs.field(alias="attempt_dir", converter=_resolved)
    bundle_digest: str
    plan_digest: str
    ambient: dict[str, str] = attrs.field(alias="environ", converter=env_copy)
    clock: Clock
    gate: SignalGate
    commands: SlurmCommands
    job_facts: Optional[JobFacts] = None  # set by run.py; cleanup's budget reads it
    api_key: str = attrs.field(init=False, factory=lambda: secrets.token_urlsafe(32))  # environments only
    bundle_dir: Path = attrs.field(init=False)
    shard: tuple[int, int] = attrs.field(init=False)  # (index, count), validated; (0, 1) unless a shard
    table: ProcessTable = attrs.field(init=False)
    layout: Layout = attrs.field(init=False)
    _plan: Optional[Plan] = attrs.field(init=False, default=None)  # kept even when preparation fails later
    _prepared: Optional[Prepared] = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        record = read_record(self.dir)
        self.bundle_dir = Path(record["bundle_dir"])
        self.shard = shard_of(record, self.ambient)
        self.table = ProcessTable(self.dir, self.clock)
        self.layout = Layout(self.attempt_id, str(self.dir), str(self.dir / files.ENDPOINTS), str(self.results_dir),
                             *self.shard, bundle_dir=str(self.bundle_dir), tmpdir=self.ambient.get("SLURM_TMPDIR") or None,
                             uid=os.getuid())

    @property
    def attempt_id(self) -> str:
        return self.dir.name

    @property
    def workspace(self) -> Path:
        return self.dir.parent.parent

    @property
    def results_dir(self) -> Path:
        return self.dir / files.RESULTS_DIR

    def checked_plan(self) -> Plan:
        """The plan, digest-checked on first use and then read from memory."""
        if self._plan is None:
            self._plan = verify.check_plan(self.dir / files.PLAN, self.plan_digest)
        return self._plan

    def prepare(self) -> Prepared:
        """Plan (digest-checked), allocation, placement, steps, runner, built once; idempotent,
        so a fresh process resuming the attempt gets the same view."""
        if self._prepared is None:
            plan = self.checked_plan()
            alloc = Allocation.from_environ(self.ambient)
            placement = place_replicas(plan, alloc.nodes, alloc.gpus_per_node)
            specs = self._replica_specs(plan, placement)
            runner = StepRunner(table=self.table, clock=self.clock, attempt_dir=self.dir, srun=self.srun(),
                                job_id=alloc.job_id,
                                interpreter=interpreter(plan.runtime.python, entry_sha256(), self.bundle_digest),
                                entry=str(self.bundle_dir / "entry.py"), srun_env=self.srun_env())
            self._prepared = Prepared(plan=plan, alloc=alloc, placement=placement, specs=specs, runner=runner)
        return self._prepared

    @property
    def prepared(self) -> Prepared:
        """The prepared values; NotPrepared before `prepare()` has succeeded in this process."""
        if self._prepared is None:
            raise NotPrepared(f"attempt {self.attempt_id}: the session was used before prepare()")
        return self._prepared

    def prepared_or_none(self) -> Optional[Prepared]:
        """For cleanup only: the prepared values if preparation succeeds now or did before, else None."""
        try:
            return self.prepare()
        except Exception:
            return self._prepared

    @property
    def prepared_if_any(self) -> Optional[Prepared]:
        """The prepared values, or None if `prepare()` has not succeeded (no new attempt is made)."""
        return self._prepared

    def cleanup_grace_s(self, default: float) -> float:
        """The plan's cleanup grace when the plan was read (even if preparation failed after), else `default`."""
        return self._plan.runtime.cleanup_grace_s if self._plan is not None else default

    def _replica_specs(self, plan: Plan, placement: tuple[Placed, ...]) -> dict[str, list[StepSpec]]:
        specs: dict[str, list[StepSpec]] = {}
        for unit in placement:
            avoid = tuple(u.port for u in placement if u.port is not None and u.leader == unit.leader)
            dep = next(d for d in plan.deployments if d.name == unit.deployment)
            specs[unit.name] = replica_steps(plan, dep, unit, self.layout, self.ambient, avoid)
        return specs

    def deployment(self, name: str) -> Deployment:
        return self.prepared.deployment(name)

    def client_spec(self, preflight: bool) -> StepSpec:
        p = self.prepared
        return client_step(p.plan, p.alloc.batch_node, self.layout, self.ambient, preflight)

    def passed(self, spec: StepSpec) -> dict[str, str]:
        """Values for the step's passed names: forwarded ones from this process's environment, and
        the attempt key under the variable the plan named for that step."""
        env = self.deployment(spec.deployment).env if spec.deployment else self.prepared.plan.client.env
        return passed_values(spec, self.ambient, self.api_key, env.api_key_var)

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

    def write_probe_request(self) -> tuple[Path, dict[str, str]]:
        """The probe's request file (fixed ports to find free, each step's expanded argv[0] with its
        own PATH), and the environment the probe needs (a forwarded PATH travels by name)."""
        prepared = self.prepared
        nodes: dict[str, dict] = {n: {"ports": [], "executables": []} for n in prepared.alloc.nodes}
        specs = [spec for steps in prepared.specs.values() for spec in steps]
        specs += [self.client_spec(p) for p in (False, True) if (prepared.plan.client.preflight_argv or not p)]
        passed: dict[str, str] = {}
        for spec in specs:
            entry = nodes.setdefault(spec.node, {"ports": [], "executables": []})
            if spec.deployment and spec.rank == 0 and not spec.choose_port:
                entry["ports"].append(int(spec.values["port"]))
            if spec.container:  # its program is inside the image: the launcher looks for it there
                entry.setdefault("images", []).append(spec.container.image)
                continue
            path = spec.env.get("PATH")
            if path is None and "PATH" in spec.passed:
                passed["PATH"] = self.ambient["PATH"]
            entry["executables"].append({"program": spec.program(), "path": path})
        for node, copies in self.weights_copies(staged_only=False).items():
            nodes.setdefault(node, {"ports": [], "executables": []})["weights"] = copies
        request = files.probe_request(self.dir)
        request.parent.mkdir(exist_ok=True)
        write_json_atomic(request, {"nodes": nodes}, durable=False)  # read by the probe moments later
        return request, passed

    def weights_copies(self, staged_only: bool = True) -> dict[str, list[dict[str, Optional[str]]]]:
        """By node: each deployment's weights its replicas there read, as {source, target} (target
        null when not staged), once per pair."""
        out: dict[str, list[dict[str, Optional[str]]]] = {}
        for unit in self.prepared.placement:
            weights = self.deployment(unit.deployment).weights
            if weights is None or (staged_only and weights.stage != "node_local"):
                continue
            for node in unit.nodes:
                target = weights_path(self.deployment(unit.deployment), node, self.layout)
                item = {"source": weights.path, "target": None if target == weights.path else target}
                if item not in out.setdefault(node, []):
                    out[node].append(item)
        return out

    def write_stage_request(self) -> Optional[Path]:
        """The staging step's request (the copies each node makes), or None when nothing is staged."""
        copies = self.weights_copies()
        if not copies:
            return None
        request = files.stage_request(self.dir)
        write_json_atomic(request, {"nodes": copies}, durable=False)
        return request

    def readiness_entries(self) -> dict[str, dict]:
        """One entry per replica, by replica name; an automatic port and its URL are known at launch."""
        return {u.name: {"deployment": u.deployment, "replica": u.replica, "nodes": list(u.nodes),
                         "model_alias": self.deployment(u.deployment).model_alias, "port": u.port,
                         "base_url": None if u.port is None else f"http://{u.leader}:{u.port}/v1"}
                for u in self.prepared.placement}

    def signal_step(self, name: str, signal_name: str, timeout_s: Optional[float] = None) -> bool:
        """Signal a step's task through Slurm (scancel --signal); False if the step never started.
        `timeout_s` bounds the call (one try), for cleanup's budget."""
        return name in self.signal_steps([name], signal_name, timeout_s)

    def signal_steps(self, names: list[str], signal_name: str, timeout_s: Optional[float] = None) -> list[str]:
        """Signal several steps' tasks through Slurm in one scancel; the names signalled (none
        when the call failed; never those that never started). `timeout_s` bounds the call."""
        prepared = self.prepared_if_any
        ids: dict[str, str] = {}
        for name in names:
            record = prepared.runner.started(name) if prepared is not None else None
            if record and record.get("step_id") and record.get("job_id"):
                ids[name] = f"{record['job_id']}.{record['step_id']}"
        if not ids:
            return []
        commands = self.commands.bounded(timeout_s) if timeout_s is not None else self.commands
        try:
            commands.signal_steps(list(ids.values()), signal_name)
        except DdSlurmError:
            return []
        return list(ids)
