"""Fake job arrays, scheduled like real Slurm: `--array=0-5%2` runs at most two tasks at once; as a
task ends (its runner reports) or is cancelled, the next pending ones start. Each task gets its own
job id and SLURM_ARRAY_* variables; squeue shows started tasks as `A_i` and the rest as one range
row `A_[2-5%2]`; a cancelled array cancels its pending range, which never starts; a pending task
cancelled on its own leaves no trace in squeue or sacct (as on Slurm 22.05)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from dd_slurm.scheduler.parse import expand_tasks

_PATTERN = re.compile(r"%(%|(\d*)([jAa]))")


def indices(spec: str) -> tuple[list[int], Optional[int]]:
    """`0-5%2` -> ([0..5], 2); `1,3` -> ([1, 3], None)."""
    body, _, throttle = spec.partition("%")
    return expand_tasks(f"[{body}]"), int(throttle) if throttle else None


def compress(tasks: list[int]) -> str:
    """[2, 3, 4, 7] -> `2-4,7`, as squeue prints pending task ranges."""
    parts, start = [], None
    for i, task in enumerate(tasks):
        if start is None:
            start = task
        if i + 1 == len(tasks) or tasks[i + 1] != task + 1:
            parts.append(str(start) if start == task else f"{start}-{task}")
            start = None
    return ",".join(parts)


def output_path(pattern: str, job_id: str, array_id: Optional[str] = None, task: Optional[int] = None) -> str:
    """sbatch's filename pattern: `%j` job id, `%A` array job id, `%a` task id, `%4a` zero-padded,
    `%%` a literal percent."""

    def one(match: re.Match) -> str:
        if match.group(1) == "%":
            return "%"
        width, letter = int(match.group(2) or 0), match.group(3)
        value = {"j": job_id, "A": array_id or job_id, "a": str(task) if task is not None else "4294967294"}[letter]
        return value.zfill(width)

    return _PATTERN.sub(one, pattern)


def pending(job: dict[str, Any]) -> list[int]:
    """Tasks not started yet (and not cancelled on their own), in order."""
    tasks = job.get("tasks", {})
    return [i for i in indices(job["array"])[0] if str(i) not in tasks]


def start_driver(fake: Any, job_id: str, environ: dict[str, str], workdir: str) -> None:
    """The array's scheduler: one detached process holding the job's environment (what --export
    took from sbatch's environment, never written anywhere) that starts tasks as slots free up."""
    proc = subprocess.Popen([sys.executable, "-m", "dd_slurm.testing.fake_slurm.arrays", str(fake.bin_dir), job_id],
                            env={**environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}, cwd=workdir,
                            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    fake.set_job(job_id, driver=proc.pid)


def drive(fake: Any, job_id: str, environ: dict[str, str]) -> None:
    """Start what fits, wait for any task's runner to end, repeat until nothing runs or waits."""
    running: list[subprocess.Popen] = []
    while True:
        running += schedule(fake, job_id, environ)
        running = [p for p in running if p.poll() is None]
        if not running:
            return
        try:
            os.wait()
        except ChildProcessError:
            return


def schedule(fake: Any, job_id: str, environ: dict[str, str]) -> list[subprocess.Popen]:
    """Start pending tasks up to the throttle (under the state lock)."""
    started = []
    with fake.edit() as state:
        job = state["jobs"][job_id]
        if job["held"] or job["cancelled_by"] is not None or job.get("state"):
            return []
        running = [t for t in job["tasks"].values() if t["pid"] and not _ended(fake, job_id, t)]
        throttle = indices(job["array"])[1]
        room = len(pending(job)) if throttle is None else max(0, throttle - len(running))
        for task in pending(job)[:room]:
            task_id = str(state["next_id"])
            state["next_id"] += 1
            proc = _launch(fake, job, task_id, task, environ)
            started.append(proc)
            job["tasks"][str(task)] = {"task": task, "job_id": task_id, "pid": proc.pid, "cancelled_by": None,
                                       "hidden": False}
    return started


def _launch(fake: Any, job: dict[str, Any], task_id: str, task: int, environ: dict[str, str]) -> subprocess.Popen:
    from dd_slurm.testing.fake_slurm.tools import allocation

    options = job["options"]
    out = os.path.join(os.getcwd(), output_path(options.get("--output") or "slurm-%A_%a.out", task_id, job["id"], task))
    tasks = indices(job["array"])[0]
    env = {"PATH": "/usr/bin:/bin", **environ, "SLURM_JOB_ID": task_id, "SLURM_ARRAY_JOB_ID": job["id"],
           "SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": str(len(tasks)),
           "SLURM_ARRAY_TASK_MIN": str(min(tasks)), "SLURM_ARRAY_TASK_MAX": str(max(tasks)),
           **allocation(options, task)}
    rc_file = fake.bin_dir / "jobs" / f"{job['id']}_{task}.rc"
    rc_file.parent.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "dd_slurm.testing.fake_slurm.runjob", str(rc_file), job["script"], out],
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ended(fake: Any, array_id: str, task: dict[str, Any]) -> bool:
    """The task's runner wrote its exit code: until then a cancelled task is still completing and
    holds its slot, as on Slurm."""
    rc_file = fake.bin_dir / "jobs" / f"{array_id}_{task['task']}.rc"
    return rc_file.exists() and bool(rc_file.read_text().strip())


def derive_task(fake: Any, array_id: str, task: dict[str, Any]) -> tuple[str, str, str]:
    """(state text, reason, exit code) of one started task."""
    if task["cancelled_by"] is not None:
        return f"CANCELLED by {task['cancelled_by']}", "None", "0:0"
    rc_file = fake.bin_dir / "jobs" / f"{array_id}_{task['task']}.rc"
    text = rc_file.read_text().strip() if rc_file.exists() else ""
    if text:
        return ("COMPLETED", "None", "0:0") if text == "0" else ("FAILED", "NonZeroExitCode", f"{text}:0")
    return "RUNNING", "None", "0:0"


def rows(fake: Any, job: dict[str, Any], derive_job) -> list[tuple[str, str, str, str]]:
    """(display id, state, reason, exit code) for squeue/sacct: started tasks, then the rest as
    one range row (pending, held, or cancelled with the array)."""
    out = []
    for key, task in sorted(job.get("tasks", {}).items(), key=lambda kv: int(kv[0])):
        if task["hidden"]:
            continue
        state, reason, code = derive_task(fake, job["id"], task)
        out.append((f"{job['id']}_{key}", state, reason, code))
    rest = pending(job)
    if rest:
        state, reason, code = derive_job(fake, job)
        throttle = indices(job["array"])[1]
        spec = compress(rest) + (f"%{throttle}" if throttle else "")
        out.append((f"{job['id']}_[{spec}]", state, reason, code))
    return out


def cancel(fake: Any, job_id: str, task: Optional[str], uid: int) -> list[int]:
    """Mark the array (or one task) cancelled; returns the pids of running tasks to signal."""
    with fake.edit() as state:
        job = state["jobs"][job_id]
        tasks = job.setdefault("tasks", {})
        if task is None:
            job["cancelled_by"] = uid
            targets = list(tasks.values())
        elif task in tasks:
            targets = [tasks[task]]
        else:
            tasks[task] = {"task": int(task), "job_id": None, "pid": None, "cancelled_by": uid, "hidden": True}
            targets = []
        pids = []
        for started in targets:
            if started["pid"] and derive_task(fake, job_id, started)[0] == "RUNNING":
                started["cancelled_by"] = uid
                pids.append(started["pid"])
    return pids


if __name__ == "__main__":
    from dd_slurm.testing.fake_slurm.state import FakeSlurm

    drive(FakeSlurm(Path(sys.argv[1])), sys.argv[2], {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
