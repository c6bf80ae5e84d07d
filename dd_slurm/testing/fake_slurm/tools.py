"""The fake Slurm executables. Only the options dd-slurm uses are accepted, as real Slurm would."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from dd_slurm.testing.fake_slurm import arrays
from dd_slurm.testing.fake_slurm.state import FakeSlurm
from dd_slurm.testing.sbatch_directives import read_directives

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE"}


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]  # real Slurm tools exit 1 on a bad option
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(1)


def main(tool: str, argv: list[str]) -> int:
    fake = FakeSlurm(Path(sys.argv[0]).resolve().parent)
    fault = fake.record_call(tool, argv)
    work = {"sbatch": sbatch, "squeue": squeue, "sacct": sacct, "scancel": scancel, "scontrol": scontrol,
            "srun": srun}[tool]
    if not fault:
        return work(fake, argv)
    return play_fault(fake, tool, argv, fault, work)


def play_fault(fake: FakeSlurm, tool: str, argv: list[str], fault: dict[str, Any], work: Any) -> int:
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
    options = batch_options(read_directives(text), os.environ)
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
        if job["array"]:
            job.update(tasks={}, options=options, script=str(Path(args.script).resolve()))
        state["jobs"][job_id] = job
    if job["array"] and not job["held"]:
        arrays.indices(str(job["array"]))  # a malformed spec fails here, as sbatch would refuse it
        environ = {**job_environment(options.get("--export"), os.environ), "SLURM_SUBMIT_DIR": os.getcwd(),
                   "SLURM_JOB_NAME": options.get("--job-name") or ""}
        arrays.start_driver(fake, job_id, environ, os.getcwd())
    elif not job["held"] and not job["array"]:
        start_job(fake, job_id, args.script, options)
    print(job_id if args.parsable else f"Submitted batch job {job_id}")
    return 0


# sbatch's input environment variables for the options the fake understands (sbatch(1), INPUT
# ENVIRONMENT VARIABLES). There is no SBATCH_NODES or SBATCH_HOLD.
SBATCH_ENV = {"SBATCH_JOB_NAME": "--job-name", "SBATCH_OUTPUT": "--output", "SBATCH_ERROR": "--error",
              "SBATCH_EXPORT": "--export", "SBATCH_GRES": "--gres", "SBATCH_ARRAY_INX": "--array",
              "SBATCH_TIMELIMIT": "--time", "SBATCH_PARTITION": "--partition", "SBATCH_ACCOUNT": "--account",
              "SBATCH_QOS": "--qos", "SBATCH_RESERVATION": "--reservation", "SBATCH_CONSTRAINT": "--constraint",
              "SBATCH_MEM_PER_NODE": "--mem", "SBATCH_SIGNAL": "--signal", "SBATCH_EXCLUSIVE": "--exclusive",
              "SBATCH_NO_REQUEUE": "--no-requeue"}


def batch_options(directives: list[tuple[str, Optional[str]]], environ: Mapping[str, str]) -> dict[str, Optional[str]]:
    """The job's options as sbatch settles them: `#SBATCH` lines, overridden by SBATCH_* variables
    (command-line options would override both; the fake accepts none that set job options)."""
    options = dict(directives)
    for variable, option in SBATCH_ENV.items():
        if variable in environ:
            options[option] = environ[variable]
    return options


def job_environment(export: Optional[str], environ: Mapping[str, str]) -> dict[str, str]:
    """What --export gives the batch script: SLURM_* of the submitting environment always; then
    NAME=value as written and a bare NAME with its value in sbatch's environment (skipped when
    unset). NONE exports nothing else; ALL or no --export exports everything."""
    items = [item for item in (export or "ALL").split(",") if item]
    env = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    if "ALL" in items:
        env.update(environ)
    for item in items:
        name, sep, value = item.partition("=")
        if sep:
            env[name] = value
        elif name not in ("ALL", "NONE") and name in environ:
            env[name] = environ[name]
    return env


def start_job(fake: FakeSlurm, job_id: str, script: str, options: dict[str, Optional[str]]) -> None:
    """Run the script as slurmd would: in the submitting directory (the job's working directory),
    with its output where sbatch puts it (relative paths are relative to that directory)."""
    workdir = os.getcwd()
    out = os.path.join(workdir, arrays.output_path(options.get("--output") or "slurm-%j.out", job_id))
    env = {**job_environment(options.get("--export"), os.environ), "SLURM_JOB_ID": job_id,
           "SLURM_JOB_NAME": options.get("--job-name") or "", "SLURM_SUBMIT_DIR": workdir, **allocation(options)}
    env.setdefault("PATH", "/usr/bin:/bin")
    rc_file = fake.bin_dir / "jobs" / f"{job_id}.rc"
    rc_file.parent.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "dd_slurm.testing.fake_slurm.runjob", str(rc_file), script, out],
                            env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=workdir)  # sbatch returns at once, like real sbatch
    fake.set_job(job_id, pid=proc.pid)




def fake_node(index: int) -> str:
    """Node k is 127.0.2.(k+1): any allocation up to 254 nodes, each with its own address."""
    return f"127.0.2.{index % 254 + 1}"


def allocation(options: dict[str, Optional[str]], first: int = 0) -> dict[str, str]:
    """The SLURM_* variables a batch script gets for its --nodes and --gres; array task i starts
    on node i, so tasks running side by side get different nodes."""
    nodes = tuple(fake_node(first + k) for k in range(int(options.get("--nodes") or 1)))
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
    jobs = fake.snapshot()["jobs"]
    wanted = _job_ids(args.jobs)
    if len(wanted) == 1 and wanted[0] not in jobs:
        print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
        return 1
    for job in jobs.values():
        if (wanted and job["id"] not in wanted) or (args.name and job["name"] != args.name) or not job["in_squeue"]:
            continue
        for display, state, reason, _ in _rows_of(fake, job):
            if state.split()[0] in TERMINAL and args.states != "all":
                continue
            fields = {"%i": display, "%A": job["id"], "%F": job["id"], "%T": state.split()[0], "%r": reason,
                      "%j": job["name"]}
            line = args.format
            for token, value in fields.items():
                line = line.replace(token, value)
            print(line)
    return 0


def _rows_of(fake: FakeSlurm, job: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    if job["array"] and "tasks" in job and not job["state"]:
        return arrays.rows(fake, job, derive)
    return [(_display_id(job), *derive(fake, job))]


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
    snapshot = fake.snapshot()
    jobs, fields = snapshot["jobs"], (args.format or SACCT_DEFAULT).split(",")
    wanted = _job_ids(args.jobs) if args.jobs else [j["id"] for j in jobs.values() if j["name"] == args.name]
    since = time.mktime(time.strptime(args.starttime, "%Y-%m-%dT%H:%M:%S")) if args.starttime else None
    for job_id in wanted:
        for old in snapshot.get("older", {}).get(job_id, []) if args.jobs else []:
            if since is None or old["ended"] >= since:
                row = {"JobID": old["display"], "JobIDRaw": old["raw"], "State": old["state"],
                       "ExitCode": old["exit"], "Reason": "None", "JobName": "older"}
                print("|".join(row[f] for f in fields))
        job = jobs.get(job_id)
        if not job or not job["in_sacct"] or (args.name and job["name"] != args.name):
            continue
        started = not job["array"] or any(t["pid"] for t in job.get("tasks", {}).values()) or job["state"]
        for display, state, _reason, exit_code in _rows_of(fake, job):
            if (state == "PENDING" and not job["state"]) or not started:
                continue  # real sacct has no record of a job that never started (fixtures/slurm/sacct-pending)
            row = {"JobID": display, "JobIDRaw": job["id"], "State": state, "ExitCode": exit_code,
                   "Reason": "None", "JobName": job["name"]}
            print("|".join(row[f] for f in fields))
            if (job["pid"] or (job["array"] and "[" not in display)) and not args.allocations:
                cancelled = state.startswith("CANCELLED")
                step = ("CANCELLED", "0:15") if cancelled else (state, exit_code)
                row = {"JobID": f"{display}.batch", "JobIDRaw": f"{job['id']}.batch", "State": step[0],
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
            if not args.signal and not job["array"]:
                job["cancelled_by"] = os.getuid()
            pids = [job["pid"]] if job["pid"] else []
        if job["array"]:
            pids = _cancel_array(fake, job, job_id, args.signal)
        for pid in pids:
            _signal_group(pid, getattr(signal, f"SIG{args.signal}") if args.signal else signal.SIGTERM)
    return status


def _cancel_array(fake: FakeSlurm, job: dict[str, Any], job_id: str, signal_name: Optional[str]) -> list[int]:
    """Cancel the whole array (`A`) or one task (`A_i`); a signal only reaches running tasks."""
    task = job_id.partition("_")[2] or None
    if signal_name:
        return [t["pid"] for key, t in job.get("tasks", {}).items() if t["pid"] and task in (None, key)
                and arrays.derive_task(fake, job["id"], t)[0] == "RUNNING"]
    return arrays.cancel(fake, job["id"], task, os.getuid())  # the array's driver starts what may start next


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
    if argv[:3] == ["show", "job", "-o"] and len(argv) == 4:
        job = fake.snapshot()["jobs"].get(argv[3])
        if job is None:
            print("slurm_load_jobs error: Invalid job id specified", file=sys.stderr)
            return 1
        state = derive(fake, job)[0].split()[0]
        print(f"JobId={job['id']} JobName={job['name']} JobState={state} TimeLimit=00:10:00 "
              f"EndTime={job.get('end_time') or 'Unknown'} Partition=debug")
        return 0
    if argv == ["show", "config"]:
        print("Configuration data as of 2026-01-01T00:00:00\nClusterName             = fake\n"
              "KillWait                = 5 sec\nMinJobAge               = 30 sec")
        return 0
    print(f"scontrol: error: fake scontrol does not implement {' '.join(argv)}", file=sys.stderr)
    return 1


def srun(fake: FakeSlurm, argv: list[str]) -> int:
    from dd_slurm.testing.fake_slurm.fake_srun import run_step

    return run_step(argv)
