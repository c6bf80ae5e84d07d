"""Fake srun: runs the step's command locally, once per node of --nodelist, with the environment
Slurm would give it under --export=NONE or --export=NAME,NAME=value,... (SLURM_* and
CUDA_VISIBLE_DEVICES, plus exactly the listed names: a bare NAME takes its value from srun's own
environment and is left out when srun does not have it, as real srun does).

Like real srun, a SIGTERM to srun kills the step's tasks with SIGKILL; a graceful stop goes through
(fake) `scancel --signal=TERM JOB.STEP`, which signals the tasks recorded here."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from dd_slurm.runtime.hostlist import expand_hostlist
from dd_slurm.testing.fake_slurm.state import FakeSlurm

# What dd-slurm passes; an option outside these is refused, as srun refuses an unknown one.
OPTIONS = ("--jobid", "--nodes", "--ntasks", "--nodelist", "--gres", "--cpus-per-task", "--export",
           "--kill-on-bad-exit", "--job-name", "--ntasks-per-node")
FLAGS = ("--overlap",)


def main(argv: list[str]) -> int:
    """The srun executable: log the call, play a scripted fault, else run the step. Standard
    library and the two small modules above only: every step of a large fake allocation pays
    this start-up, so it imports no more than it needs."""
    fake = FakeSlurm(Path(sys.argv[0]).resolve().parent)
    fault = fake.record_call("srun", argv)
    if fault:
        from dd_slurm.testing.fake_slurm.tools import play_fault

        return play_fault(fake, "srun", argv, fault, lambda _fake, args: run_step(args))
    return run_step(argv)


def parse(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(options by name without dashes, command); SystemExit(1) for an option srun would refuse."""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        name, sep, value = argv[i].partition("=")
        if name in FLAGS and not sep:
            options[name[2:]] = "1"
        elif name in OPTIONS and (sep or i + 1 < len(argv)):
            if not sep:
                i, value = i + 1, argv[i + 1]
            options[name[2:].replace("-", "_")] = value
        else:
            print(f"srun: unrecognized option '{argv[i]}'", file=sys.stderr)
            raise SystemExit(1)
        i += 1
    return options, argv[i:]


def _program(command: list[str], env: dict[str, str]) -> str:
    """argv[0] as exec would find it: a path as given, else on the task environment's PATH."""
    if os.sep in command[0]:
        return command[0]
    for directory in os.get_exec_path(env):
        candidate = os.path.join(directory, command[0])
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return command[0]


def run_step(argv: list[str]) -> int:
    args, command = parse(argv)
    export = args.get("export")
    items = [] if export == "NONE" else (export or "").split(",")
    if not export or "ALL" in items or not all(items):
        print(f"srun: fake srun wants --export=NONE or a list of names, not {export!r}", file=sys.stderr)
        return 1
    if not command:
        print("srun: fatal: No command given to execute.", file=sys.stderr)
        return 1
    exported = dict(item.split("=", 1) for item in items if "=" in item)
    exported.update({item: os.environ[item] for item in items if "=" not in item and item in os.environ})
    fake = FakeSlurm(Path(sys.argv[0]).resolve().parent)
    jobid = args.get("jobid", "")
    with fake.edit() as state:
        step_id = str(state.setdefault("next_step", {}).setdefault(jobid, 0))
        state["next_step"][jobid] += 1
    gres = args.get("gres") or ""
    gpus = int(gres.split(":")[1]) if gres.startswith("gpu:") else 0
    nodes = expand_hostlist(args.get("nodelist", ""))
    children = [_spawn(command, _task_env(args, exported, jobid, step_id, node, rank, gpus),
                       forward_stdin=len(nodes) == 1)
                for rank, node in enumerate(nodes)]
    with fake.edit() as state:
        state.setdefault("steps", {})[f"{jobid}.{step_id}"] = children
    return _wait(children)


def _task_env(args: dict[str, str], exported: dict[str, str], jobid: str, step_id: str, node: str, rank: int,
              gpus: int) -> dict[str, str]:
    env = {"SLURM_JOB_ID": jobid, "SLURM_STEP_ID": step_id, "SLURMD_NODENAME": node, "SLURM_PROCID": str(rank),
           "SLURM_STEP_NODELIST": args.get("nodelist", ""), **exported}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
        env["SLURM_GPUS_ON_NODE"] = str(gpus)
    return env


def _spawn(command: list[str], env: dict[str, str], forward_stdin: bool) -> int:
    """One task, stdout and stderr srun's own (the step's log). A one-task step reads srun's own
    stdin, as real srun forwards it (a held step is released through it); the tasks of a
    several-task step read /dev/null (real srun copies its stdin to each; nothing here uses that)."""
    actions = [] if forward_stdin else [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    return os.posix_spawn(_program(command, env), command, env, file_actions=actions)


def _wait(children: list[int]) -> int:
    """Every task's exit; like real srun, a SIGTERM to srun kills the tasks still running with SIGKILL.
    The first failing task's code (128 + signal for a killed one) is srun's."""
    codes: dict[int, int] = {}

    def kill_tasks(_signo: int, _frame: object) -> None:
        for pid in children:
            if pid not in codes:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    signal.signal(signal.SIGTERM, kill_tasks)
    for pid in children:
        codes[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    bad = [codes[pid] for pid in children if codes[pid] != 0]
    return (bad[0] if bad[0] > 0 else 128 - bad[0]) if bad else 0


def signal_step(fake: FakeSlurm, step: str, signo: int) -> bool:
    with fake.edit() as state:
        pids = state.get("steps", {}).get(step)
    if pids is None:
        return False
    for pid in pids:
        try:
            os.kill(pid, signo)
        except ProcessLookupError:
            pass
    return True
