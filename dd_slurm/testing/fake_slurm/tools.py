"""The fake Slurm executables. Only the options dd-slurm uses are accepted, as real Slurm would."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from dd_slurm.testing.fake_slurm.state import FakeSlurm
from dd_slurm.testing.sbatch_directives import read_directives

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # real Slurm tools exit 1 on a bad option
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(1)


def main(tool: str, argv: list[str]) -> int:
    fake = FakeSlurm(Path(sys.argv[0]).resolve().parent)
    with fake.edit() as state:
        state["calls"].append({"tool": tool, "argv": argv})
        queue = state["faults"].get(tool) or []
        index = next((i for i, f in enumerate(queue) if not f.get("match") or f["match"] in argv), None)
        fault = queue.pop(index) if index is not None else None
    work = {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scancel": scancel, "scontrol": scontrol,
            "srun": srun}[tool]
    if not fault:
        return work(fake, argv)
    if fault.get("after_work"):
        with open(os.devnull, "w") as sink:
            sys.stdout, real = sink, sys.stdout
            try:
                work(fake, argv)
            finally:
                sys.stdout = real
        if tool == "sbatch" and fault.get("job"):  # what the created job then looks like
            with fake.edit() as state:
                state["jobs"][str(state["next_id"] - 1)].update(fault["job"])
    time.sleep(fault["hang"])
    sys.stdout.write(fault["stdout"])
    sys.stderr.write(fault["stderr"])
    return fault["exit"]


def sbatch(fake: FakeSlurm, argv: list[str]) -> int:
    p = Parser(prog="sbatch")
    p.add_argument("--parsable", action="store_true")
    p.add_argument("--test-only", action="store_true")
    p.add_argument("script")
    args = p.parse_args(argv)
    text = Path(args.script).read_text()
    options = dict(read_directives(text))
    if args.test_only:
        print("sbatch: Job 1 to start at 2026-01-01T00:00:00 using 1 processors on nodes n1 in partition debug",
              file=sys.stderr)
        return 0
    with fake.edit() as state:
        job_id = str(state["next_id"])
        state["next_id"] += 1
        job = {"id": job_id, "name": options.get("--job-name") or Path(args.script).name, "held": "--hold" in options,
               "array": options.get("--array"), "pid": None, "cancelled_by": None, "in_squeue": True,
               "in_sacct": True, "state": None, "reason": None, "exit": None}
        state["jobs"][job_id] = job
    if not job["held"] and not job["array"]:
        start_job(fake, job_id, args.script, options)
    print(job_id if args.parsable else f"Submitted batch job {job_id}")
    return 0


def start_job(fake: FakeSlurm, job_id: str, script: str, options: dict[str, Optional[str]]) -> None:
    out = (options.get("--output") or f"slurm-{job_id}.out").replace("%%", "\0").replace("%j", job_id).replace("\0", "%")
    env = {"SLURM_JOB_ID": job_id, "SLURM_JOB_NAME": options.get("--job-name") or "", "PATH": "/usr/bin:/bin",
           **allocation(options)}
    for item in (options.get("--export") or "").split(","):
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
    rc_file = fake.bin_dir / "jobs" / f"{job_id}.rc"
    rc_file.parent.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "dd_slurm.testing.fake_slurm.runjob", str(rc_file), script, out],
                            env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # like real sbatch, it returns at once
    fake.set_job(job_id, pid=proc.pid)


FAKE_NODES = ("127.0.2.1", "127.0.2.2", "127.0.2.3")  # loopback addresses: they resolve everywhere


def allocation(options: dict[str, Optional[str]]) -> dict[str, str]:
    """The SLURM_* variables a batch script gets for its --nodes and --gres."""
    nodes = FAKE_NODES[: int(options.get("--nodes") or 1)]
    env = {"SLURM_JOB_NODELIST": ",".join(nodes), "SLURM_JOB_NUM_NODES": str(len(nodes)), "SLURMD_NODENAME": nodes[0]}
    gres = options.get("--gres") or ""
    if gres.startswith("gpu:"):
        count = int(gres.split(":")[-1])
        env.update(SLURM_GPUS_ON_NODE=str(count), CUDA_VISIBLE_DEVICES=",".join(map(str, range(count))))
    return env


def derive(fake: FakeSlurm, job: dict[str, Any]) -> tuple[str, str, str]:
    """(state text, reason, exit code) as squeue/sacct would report the job now."""
    if job["state"]:
        return job["state"], job["reason"] or "None", job["exit"] or "0:0"
    if job["cancelled_by"] is not None:
        return f"CANCELLED by {job['cancelled_by']}", "None", "0:0"
    if job["held"]:
        return "PENDING", "JobHeldUser", "0:0"
    if job["array"]:
        return "PENDING", "JobArrayTaskLimit" if "%" in job["array"] else "Priority", "0:0"
    rc_file = fake.bin_dir / "jobs" / f"{job['id']}.rc"
    if rc_file.exists() and rc_file.read_text().strip():
        rc = int(rc_file.read_text())
        return ("COMPLETED", "None", "0:0") if rc == 0 else ("FAILED", "NonZeroExitCode", f"{rc}:0")
    return "RUNNING", "None", "0:0"


def _job_ids(spec: Optional[str]) -> list[str]:
    return [i.split("_")[0] for i in spec.split(",")] if spec else []


def _display_id(job: dict[str, Any]) -> str:
    return f"{job['id']}_[{job['array']}]" if job["array"] else job["id"]


def squeue(fake: FakeSlurm, argv: list[str]) -> int:
    p = Parser(prog="squeue")
    for flag in ("--noheader",):
        p.add_argument(flag, action="store_true")
    p.add_argument("--states")
    p.add_argument("--jobs")
    p.add_argument("--name")
    p.add_argument("--format", default="%i %T")
    args = p.parse_args(argv)
    jobs = fake.read()["jobs"]
    wanted = _job_ids(args.jobs)
    if len(wanted) == 1 and wanted[0] not in jobs:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    for job in jobs.values():
        if (wanted and job["id"] not in wanted) or (args.name and job["name"] != args.name) or not job["in_squeue"]:
            continue
        state, reason, _ = derive(fake, job)
        if state.split()[0] in TERMINAL and args.states != "all":
            continue
        fields = {"%i": _display_id(job), "%A": job["id"], "%F": job["id"], "%T": state.split()[0], "%r": reason,
                  "%j": job["name"]}
        line = args.format
        for token, value in fields.items():
            line = line.replace(token, value)
        print(line)
    return 0


def sacct(fake: FakeSlurm, argv: list[str]) -> int:
    p = Parser(prog="sacct")
    p.add_argument("--noheader", action="store_true")
    p.add_argument("--parsable2", action="store_true")
    p.add_argument("--jobs")
    p.add_argument("--format")
    p.add_argument("--name")
    p.add_argument("--starttime")
    p.add_argument("--allocations", "-X", action="store_true")
    args = p.parse_args(argv)
    if not args.jobs and not args.starttime:
        print("sacct: fake sacct wants --jobs or --starttime (real sacct defaults to today only)", file=sys.stderr)
        return 1
    jobs = fake.read()["jobs"]
    wanted = _job_ids(args.jobs) if args.jobs else [j["id"] for j in jobs.values() if j["name"] == args.name]
    for job_id in wanted:
        job = jobs.get(job_id)
        if not job or not job["in_sacct"] or (args.name and job["name"] != args.name):
            continue
        state, _reason, exit_code = derive(fake, job)
        if state == "PENDING" and not job["state"]:
            continue  # real sacct has no record of a job that never started (fixtures/slurm/sacct-pending)
        fields = (args.format or SACCT_DEFAULT).split(",")
        row = {"JobID": _display_id(job), "JobIDRaw": job["id"], "State": state, "ExitCode": exit_code,
               "Reason": "None", "JobName": job["name"]}
        print("|".join(row[f] for f in fields))
        if job["pid"] and not args.allocations:
            cancelled = state.startswith("CANCELLED")
            step = ("CANCELLED", "0:15") if cancelled else (state, exit_code)
            row = {"JobID": f"{job['id']}.batch", "JobIDRaw": f"{job['id']}.batch", "State": step[0],
                   "ExitCode": step[1], "Reason": "", "JobName": "batch"}
            print("|".join(row[f] for f in fields))
    return 0


SACCT_DEFAULT = "JobID,JobName,State,ExitCode"


def scancel(fake: FakeSlurm, argv: list[str]) -> int:
    p = Parser(prog="scancel")
    p.add_argument("--signal")
    p.add_argument("--batch", action="store_true")
    p.add_argument("job_ids", nargs="+")
    args = p.parse_args(argv)
    status = 0
    for job_id in args.job_ids:
        if "." in job_id:
            from dd_slurm.testing.fake_slurm.fake_srun import signal_step

            if not signal_step(fake, job_id, getattr(signal, f"SIG{args.signal or 'KILL'}")):
                print(f"scancel: error: Kill job error on job id {job_id}: Invalid job id specified", file=sys.stderr)
                status = 1
            continue
        with fake.edit() as state:
            job = state["jobs"].get(job_id.split("_")[0])
            if job is None:
                print(f"scancel: error: Kill job error on job id {job_id}: Invalid job id specified", file=sys.stderr)
                status = 1
                continue
            if not args.signal:
                job["cancelled_by"] = os.getuid()
            pid = job["pid"]
        if pid:
            _signal_group(pid, getattr(signal, f"SIG{args.signal}") if args.signal else signal.SIGTERM)
    return status


def _signal_group(pid: int, signo: int) -> None:
    try:
        os.killpg(pid, signo)
    except (ProcessLookupError, PermissionError):
        pass


def scontrol(fake: FakeSlurm, argv: list[str]) -> int:
    if argv[:2] == ["show", "hostnames"] and len(argv) == 3:
        from dd_slurm.runtime.hostlist import expand_hostlist

        print("\n".join(expand_hostlist(argv[2])))
        return 0
    print(f"scontrol: error: fake scontrol does not implement {' '.join(argv)}", file=sys.stderr)
    return 1


def srun(fake: FakeSlurm, argv: list[str]) -> int:
    from dd_slurm.testing.fake_slurm.fake_srun import run_step

    return run_step(argv)
