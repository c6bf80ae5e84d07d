"""Run real attempts on fake Slurm: stage a fixture plan with free ports, give the supervisor a
fake allocation, and look at what it left behind."""

from __future__ import annotations

import json
import os
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from dd_slurm.bundle.stage import stage
from dd_slurm.clock import Clock
from dd_slurm.plan.io import parse_plan
from dd_slurm.runtime.node.leftover_scan import leftovers
from dd_slurm.runtime.run import run_attempt
from tests.conftest import PLANS

NODES = ("127.0.2.1", "127.0.2.2", "127.0.2.3")


# Below the kernel's ephemeral range (32768-60999 here): a port from that range, free when asked,
# can become the source port of any outgoing connection (probes, Slurm RPCs) before the server
# binds it, and the server then fails with "Address already in use".
PORTS = range(20000, 32000)


def free_port() -> int:
    """A port no socket on 127.0.0.1 holds now, outside the ephemeral range, chosen at random so
    that tests running side by side rarely pick the same one."""
    for _ in range(200):
        port = random.choice(PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


def plan_data(name: str = "single-node") -> dict:
    """A fixture plan with free ports (argv uses {port}; the leader/follower coordination port is
    literal, so both sides get the same fresh one; a null port stays null: the runtime chooses it)
    and a short cleanup grace."""
    data = json.loads((PLANS / f"{name}.json").read_text())
    for dep in data["deployments"]:
        if dep.get("port") is not None:
            dep["port"] = free_port()
        coord = str(free_port())
        for argv in (dep["argv"], dep.get("follower_argv") or []):
            if "--coord-port" in argv:
                argv[argv.index("--coord-port") + 1] = coord
    data["runtime"]["cleanup_grace_s"] = 2
    return data


def stage_plan(tmp_path: Path, data: dict):
    return stage(parse_plan(json.dumps(data)), tmp_path / "ws", Clock())


def allocation_env(bin_dir: Path, nodes: tuple[str, ...], gpus: int, **extra: str) -> dict[str, str]:
    nodelist = ",".join(nodes)
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": nodelist, "SLURM_JOB_NUM_NODES": str(len(nodes)),
           "SLURMD_NODENAME": nodes[0], "DD_SLURM_BIN_DIR": str(bin_dir), "PATH": "/usr/bin:/bin"}
    if gpus:
        env["SLURM_GPUS_ON_NODE"] = str(gpus)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    env.update(extra)
    return env


def run(tmp_path: Path, fake_slurm, data: dict, nodes: Optional[tuple[str, ...]] = None, gpus: Optional[int] = None,
        before_run: Optional[Callable] = None, **extra_env: str):
    staged = stage_plan(tmp_path, data)
    if before_run:
        before_run(staged)
    nodes = nodes or NODES[: data["job"]["nodes"]]
    env = allocation_env(fake_slurm.bin_dir, nodes, data["job"]["gpus_per_node"] if gpus is None else gpus, **extra_env)
    attempt = run_attempt(staged.attempt_dir, staged.bundle_digest, staged.plan_digest, environ=env)
    return attempt, staged


def supervisor_argv(staged, data: dict) -> list[str]:
    """The exec line of the attempt's rendered script: the boot, entry.py, `run`."""
    from dd_slurm.bundle.manifest import entry_sha256
    from dd_slurm.scheduler.render import ScriptContext, exec_argv

    ctx = ScriptContext(staged.attempt_id, str(staged.attempt_dir), str(staged.bundle_dir), staged.bundle_digest,
                        staged.plan_digest, entry_sha256=entry_sha256())
    return exec_argv(parse_plan(json.dumps(data)), ctx)


def journal(attempt_dir: Path) -> list[tuple[str, str, Optional[str]]]:
    lines = (attempt_dir / "journal.jsonl").read_text().splitlines()
    return [(e["from"], e["to"], e.get("reason")) for e in map(json.loads, lines) if e["kind"] == "transition"]


def failure_path(reason: str, probed: bool) -> list[tuple[str, str, Optional[str]]]:
    """The journal of an attempt failing verification: local checks fail it from staged; the node
    probe's findings from preflight, which starts the probe and the client preflight side by side."""
    start: list[tuple[str, str, Optional[str]]] = [("staged", "verified", None), ("verified", "preflight", None),
                                                   ("preflight", "cleanup", reason)] if probed else \
        [("staged", "cleanup", reason)]
    return [*start, ("cleanup", "done", reason)]


def outcome(attempt_dir: Path) -> tuple[Optional[str], Optional[str]]:
    lines = (attempt_dir / "journal.jsonl").read_text().splitlines()
    last = [e for e in map(json.loads, lines) if e["kind"] == "transition"][-1]
    return last.get("outcome"), last.get("reason")


def evidence(attempt_dir: Path) -> str:
    """For a failure message: the attempt's last journal entries and the last lines of its logs."""
    lines = (attempt_dir / "journal.jsonl").read_text().splitlines()[-4:] if (attempt_dir / "journal.jsonl").exists() else []
    logs = [f"--- {log.name}: " + " | ".join(log.read_text(errors="replace").splitlines()[-6:])
            for log in sorted((attempt_dir / "logs").glob("*.log"))]
    return "\n".join([str(attempt_dir), *lines, *logs])


def three_single_node_deployments(data: dict) -> dict:
    """The single-node plan with three one-node deployments on a 3-node job: placement puts them
    on the first, second and third node, whichever nodes Slurm picks."""
    for name in ("second", "third"):
        data["deployments"].append(dict(data["deployments"][0], name=name, model_alias=f"{name}-model",
                                        port=free_port()))
    data["job"].update(nodes=3, gpus_per_node=1)
    return data


def read(attempt_dir: Path, name: str):
    path = attempt_dir / name
    return json.loads(path.read_text()) if path.exists() else None


def servers_started(attempt_dir: Path) -> list[str]:
    return sorted(p.name for p in (attempt_dir / "steps").glob("deploy-*.started.json")) \
        if (attempt_dir / "steps").exists() else []


def no_leftovers(attempt_id: str) -> list[dict]:
    """Processes anywhere on this machine carrying the attempt's id (the fake nodes are all here)."""
    return [p for p in leftovers(attempt_id) if p["pid"] != os.getpid()]


def fake_step_runner(staged, table, clock: Clock, bin_dir: Path):
    """The step runner a supervisor of `staged` would have, on the fake srun in `bin_dir` (job 4242)."""
    from dd_slurm.bundle.manifest import entry_sha256
    from dd_slurm.runtime.step_runner import StepRunner
    from dd_slurm.scheduler.render import interpreter

    return StepRunner(table=table, clock=clock, attempt_dir=staged.attempt_dir, srun=str(Path(bin_dir) / "srun"),
                      job_id="4242", interpreter=interpreter("/usr/bin/python3", entry_sha256(), staged.bundle_digest),
                      entry=str(staged.bundle_dir / "entry.py"),
                      srun_env={"PATH": "/usr/bin:/bin", "DD_SLURM_ATTEMPT_ID": staged.attempt_id})
