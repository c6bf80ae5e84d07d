"""Fake srun: runs the step's command locally, once per node of --nodelist, with the environment
Slurm would give it under --export=NONE or --export=NAME,NAME=value,... (SLURM_* and
CUDA_VISIBLE_DEVICES, plus exactly the listed names: a bare NAME takes its value from srun's own
environment and is left out when srun does not have it, as real srun does).

Like real srun, a SIGTERM to srun kills the step's tasks with SIGKILL; a graceful stop goes through
(fake) `scancel --signal=TERM JOB.STEP`, which signals the tasks recorded here."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from dd_slurm.runtime.hostlist import expand_hostlist
from dd_slurm.testing.fake_slurm.state import FakeSlurm


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(prog="srun")
    for option in ("--jobid", "--nodes", "--ntasks", "--nodelist", "--gres", "--cpus-per-task", "--export",
                   "--kill-on-bad-exit", "--job-name", "--ntasks-per-node"):
        p.add_argument(option)
    p.add_argument("--overlap", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    return args, args.command


def run_step(argv: list[str]) -> int:
    args, command = parse(argv)
    items = [] if args.export == "NONE" else (args.export or "").split(",")
    if not args.export or "ALL" in items or not all(items):
        print(f"srun: fake srun wants --export=NONE or a list of names, not {args.export!r}", file=sys.stderr)
        return 1
    exported = dict(item.split("=", 1) for item in items if "=" in item)
    exported.update({item: os.environ[item] for item in items if "=" not in item and item in os.environ})
    fake = FakeSlurm(Path(sys.argv[0]).resolve().parent)
    with fake.edit() as state:
        step_id = str(state.setdefault("next_step", {}).setdefault(args.jobid, 0))
        state["next_step"][args.jobid] += 1
    gpus = int(args.gres.split(":")[1]) if args.gres and args.gres.startswith("gpu:") else 0
    nodes = expand_hostlist(args.nodelist)
    children = []
    for rank, node in enumerate(nodes):
        env = {"SLURM_JOB_ID": args.jobid, "SLURM_STEP_ID": step_id, "SLURMD_NODENAME": node,
               "SLURM_PROCID": str(rank), "SLURM_STEP_NODELIST": args.nodelist, **exported}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
            env["SLURM_GPUS_ON_NODE"] = str(gpus)
        children.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))
    with fake.edit() as state:
        state.setdefault("steps", {})[f"{args.jobid}.{step_id}"] = [c.pid for c in children]

    def kill_tasks(_signo: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.kill()

    signal.signal(signal.SIGTERM, kill_tasks)
    codes = [child.wait() for child in children]
    bad = [c for c in codes if c != 0]
    return (bad[0] if bad[0] > 0 else 128 - bad[0]) if bad else 0


def signal_step(fake: FakeSlurm, step: str, signo: int) -> bool:
    pids = fake.read().get("steps", {}).get(step)
    if pids is None:
        return False
    for pid in pids:
        try:
            os.kill(pid, signo)
        except ProcessLookupError:
            pass
    return True
