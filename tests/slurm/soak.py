"""A randomized soak on the lab cluster: many attempts at once, each with one random fault at a
random moment; afterwards every attempt's effective outcome must agree with what was done to it,
its journal and records must parse, and nothing of it may be left on any node.

Reproduce a run with DD_SLURM_SOAK_SEED=<seed>; DD_SLURM_SOAK_N sets the number of attempts."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import attrs

from dd_slurm.machine.journal import current_state, read_journal
from dd_slurm.runtime.node.leftover_scan import leftovers
from dd_slurm.runtime.node.procfs import start_time
from dd_slurm.store.readiness import validate_record
from tests.runtime.harness import plan_data
from tests.slurm.real_attempt import CLUSTER, EXE, submit, wait_job_gone

FAULTS = ("none", "scancel", "usr1_batch", "kill_server", "kill_client", "kill_supervisor", "stop_server",
          "status_storm", "cancel_storm")
STATES = ("staged", "verified", "preflight", "deploying", "ready", "client", "finalize", "cleanup", "done")
MOMENTS = {  # where each fault may land
    "kill_server": ("deploying", "client"), "stop_server": ("deploying", "client"), "kill_client": ("client",),
}
ANY_MOMENT = ("staged", "verified", "preflight", "deploying", "client", "finalize")
SCHEDULER_OUTCOME = {"cancelled": "cancelled", "timeout": "timed_out"}  # anything else ended: failed
EXPECTED = {  # fault -> the (outcome, reason) pairs it may produce once it landed before the outcome was decided
    "none": {("succeeded", "ok")},
    "status_storm": {("succeeded", "ok")},
    "scancel": {("cancelled", "sigterm"), ("cancelled", "supervisor_lost")},
    "cancel_storm": {("cancelled", "sigterm"), ("cancelled", "supervisor_lost")},
    "usr1_batch": {("timed_out", "pre_timeout_signal")},
    "kill_server": {("failed", "server_crashed"), ("failed", "server_exited_while_loading"),
                    ("failed", "client_failed")},
    "kill_client": {("failed", "client_failed")},
    "kill_supervisor": {("failed", "supervisor_lost"), ("cancelled", "supervisor_lost")},
    "stop_server": {("timed_out", "readiness_timeout"), ("failed", "client_timeout"), ("failed", "client_failed")},
}


@attrs.define
class Trial:
    index: int
    fault: str
    moment: str
    delay_s: float
    attempt_dir: Optional[Path] = None
    job_id: str = ""
    fired_at: Optional[float] = None
    effective: Optional[dict] = None
    problems: list = attrs.Factory(list)


def soak_plan(rng: random.Random) -> dict:
    data = plan_data("single-node")
    argv = data["deployments"][0]["argv"]
    argv[argv.index("--load-time") + 1] = f"{rng.uniform(0.5, 1.5):.2f}"
    data["deployments"][0]["ready_timeout_s"] = 8
    data["client"]["argv"] += ["--sleep", f"{rng.uniform(1.0, 2.5):.2f}"]
    data["client"]["timeout_s"] = 8
    data["runtime"]["cleanup_grace_s"] = 2
    return data


def trials(rng: random.Random, count: int) -> list[Trial]:
    found = []
    for index in range(count):
        fault = FAULTS[index % len(FAULTS)] if index < len(FAULTS) else rng.choice(FAULTS)
        moment = rng.choice(MOMENTS.get(fault, ANY_MOMENT))
        found.append(Trial(index, fault, moment, round(rng.uniform(0.0, 0.4), 3)))
    return found


def _state(attempt_dir: Path) -> str:
    return current_state(read_journal(attempt_dir / "journal.jsonl"), "staged")


def _wait_for(attempt_dir: Path, state: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = _state(attempt_dir)
        if STATES.index(now) >= STATES.index(state):
            return
        time.sleep(0.05)


def _pid_of(attempt_dir: Path, record: str, wait_s: float = 10.0) -> Optional[tuple[int, int]]:
    """The pid (and start time) a record names, waiting a little for the record to appear."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            data = json.loads((attempt_dir / record).read_text())
            return data["pid"], data.get("start_time")
        except (OSError, ValueError, KeyError):
            if time.monotonic() > deadline or _state(attempt_dir) == "done":
                return None
            time.sleep(0.02)


def _signal(identity: Optional[tuple[int, int]], signo: int) -> bool:
    if identity and (identity[1] is None or start_time(identity[0]) == identity[1]):
        try:
            os.kill(identity[0], signo)
            return True
        except ProcessLookupError:
            pass
    return False


def _storm(argv: list[str], times: int) -> None:
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=CLUSTER["current"].env())
             for _ in range(times)]
    for proc in procs:
        proc.wait(timeout=120)


def _first_cancel(attempt_dir: Path) -> Optional[float]:
    """When the first `dd-slurm cancel` of the storm recorded its request (right after its
    scancel); None when none did: each found the job already ended, so nothing was sent."""
    requests = json.loads((attempt_dir / "attempt.json").read_text()).get("cancel_requests") or []
    times = [r["time"] for r in requests if isinstance(r, dict) and isinstance(r.get("time"), (int, float))]
    return min(times) if times else None


def fire(trial: Trial) -> bool:
    """Do the fault; False when its target was already gone (nothing was done)."""
    d, job = trial.attempt_dir, trial.job_id
    fault = trial.fault
    if fault in ("kill_server", "stop_server"):
        return _signal(_pid_of(d, "steps/deploy-small-0.started.json"),
                       signal.SIGKILL if fault == "kill_server" else signal.SIGSTOP)
    if fault == "kill_client":
        return _signal(_pid_of(d, "steps/client.started.json"), signal.SIGKILL)
    if fault == "kill_supervisor":
        return _signal(_pid_of(d, "supervisor.json"), signal.SIGKILL)
    if fault == "scancel":
        subprocess.run([CLUSTER["current"].tool("scancel"), job], timeout=30, env=CLUSTER["current"].env())
    elif fault == "usr1_batch":
        subprocess.run([CLUSTER["current"].tool("scancel"), "--batch", "--signal=USR1", job], timeout=30,
                       env=CLUSTER["current"].env())
    elif fault == "status_storm":
        _storm(EXE + ["status", "--json", str(d)], 8)
    elif fault == "cancel_storm":
        _storm(EXE + ["cancel", str(d)], 4)
    return fault != "status_storm"


def run_trial(trial: Trial, tmp: Path, rng_seed: int) -> Trial:
    rng = random.Random(rng_seed)
    (tmp / f"t{trial.index}").mkdir(parents=True)
    name = f"soak{trial.index}-{trial.fault.replace('_', '-')}"
    trial.attempt_dir, trial.job_id = submit(tmp / f"t{trial.index}", soak_plan(rng), name)
    if trial.fault != "none":
        _wait_for(trial.attempt_dir, trial.moment)
        time.sleep(trial.delay_s)
        fired_at = time.time()
        trial.fired_at = fired_at if fire(trial) else None
        if trial.fault == "cancel_storm":  # it lands when a `dd-slurm cancel` got to scancel, not when they started
            trial.fired_at = _first_cancel(trial.attempt_dir)
    _wait_for(trial.attempt_dir, "done", 90)
    wait_job_gone(trial.job_id, 120)
    if trial.fault == "stop_server":  # a stopped server the job's end left behind must still die
        _signal(_pid_of(trial.attempt_dir, "steps/deploy-small-0.started.json"), signal.SIGCONT)
    check(trial)
    return trial


def effective(view: dict) -> Optional[dict]:
    """The contract's `effective` when status has it; otherwise derived the same way."""
    if "effective" in view:
        return view["effective"]
    attempt, scheduler = view["attempt"], view.get("scheduler")
    if attempt["state"] == "done":
        return {"outcome": attempt["outcome"], "reason": attempt["reason"], "from": "attempt"}
    if scheduler and (scheduler["terminal"] or scheduler["state"] == "lost"):
        outcome = SCHEDULER_OUTCOME.get(scheduler["state"], "failed")
        started = (Path(attempt["dir"]) / "journal.jsonl").exists() or (Path(attempt["dir"]) / "supervisor.json").exists()
        return {"outcome": outcome, "reason": "supervisor_lost" if started else "never_started", "from": "scheduler"}
    return None


RACE_S = 0.5  # a fault fired this close to the client's end may land on either side of it


def _moves(attempt_dir: Path) -> dict[str, dict]:
    return {e["to"]: e for e in read_journal(attempt_dir / "journal.jsonl") if e.get("kind") == "transition"}


def _batch_started(attempt_dir: Path) -> float:
    """When the batch step's process started (the supervisor is that process, exec'd); -inf when
    it never wrote its record, so that no fault counts as fired before it."""
    try:
        return float(json.loads((attempt_dir / "supervisor.json").read_text())["started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return float("-inf")


def expected(trial: Trial) -> set[tuple[str, str]]:
    """What the attempt may end as, given its fault and when it fired. Once the client has exited,
    the work is done: a later fault changes nothing (or, for the supervisor, leaves cleanup)."""
    moves = _moves(trial.attempt_dir)
    decided = {(moves["cleanup"]["outcome"], moves["cleanup"]["reason"])} if "cleanup" in moves else set()
    if trial.fired_at is None:
        return {("succeeded", "ok")}
    found = set(EXPECTED[trial.fault])
    if trial.fault in ("scancel", "usr1_batch", "cancel_storm"):  # landed before (or at) the first instruction
        found |= {("cancelled", "supervisor_lost"), ("failed", "supervisor_lost"), ("cancelled", "never_started"),
                  ("failed", "never_started")}
    if trial.fault == "usr1_batch" and trial.fired_at < _batch_started(trial.attempt_dir):
        found.add(("succeeded", "ok"))  # Slurm loses a batch signal sent before the batch step launched
    finished = moves.get("finalize", {}).get("ts")
    if trial.fault == "kill_supervisor":
        return decided | found if "done" in moves else found
    if finished is not None and trial.fired_at >= finished - RACE_S:
        return decided | (found if trial.fired_at < finished + RACE_S else set())
    return found


def check(trial: Trial) -> None:
    d = trial.attempt_dir
    try:
        entries = read_journal(d / "journal.jsonl")
        assert all(isinstance(e, dict) and "kind" in e for e in entries)
        for name in ("attempt.json", "processes.json", "cleanup.json", "supervisor.json"):
            if (d / name).exists():
                json.loads((d / name).read_text())
        if (d / "readiness.json").exists():
            assert [] == validate_record(json.loads((d / "readiness.json").read_text()))
    except (AssertionError, ValueError) as err:
        trial.problems.append(f"records do not parse: {err}")
    out = subprocess.run(EXE + ["status", "--json", str(d)], capture_output=True, text=True, timeout=60,
                         env=CLUSTER["current"].env())
    trial.effective = effective(json.loads(out.stdout)) if out.returncode == 0 else None
    got = (trial.effective or {}).get("outcome"), (trial.effective or {}).get("reason")
    if got not in expected(trial):
        trial.problems.append(f"effective {got} not in {sorted(expected(trial))}")


def soak(tmp: Path, count: int, seed: int, workers: int = 6) -> tuple[list[Trial], list[dict]]:
    """Run the trials; returns them and whatever of theirs is still running anywhere."""
    rng = random.Random(seed)
    planned = trials(rng, count)
    seeds = [rng.randrange(2 ** 32) for _ in planned]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(lambda pair: _safe(pair[0], tmp, pair[1]), zip(planned, seeds)))
    time.sleep(1.0)
    left = [{**p, "attempt": t.attempt_dir.name} for t in done if t.attempt_dir for p in leftovers(t.attempt_dir.name)]
    return done, left


def _safe(trial: Trial, tmp: Path, seed: int) -> Trial:
    try:
        return run_trial(trial, tmp, seed)
    except Exception as err:
        trial.problems.append(f"{type(err).__name__}: {err}")
        return trial


def summary(done: list[Trial], left: list[dict], seed: int) -> str:
    agreed = sum(1 for t in done if not t.problems)
    lines = [f"soak: {agreed}/{len(done)} attempts agreed with what happened; {len(left)} processes left; seed {seed}"]
    tally: dict[str, int] = {}
    for t in done:
        key = f"{t.fault}->{(t.effective or {}).get('outcome')}/{(t.effective or {}).get('reason')}"
        tally[key] = tally.get(key, 0) + 1
    lines.append("  " + ", ".join(f"{k} x{n}" for k, n in sorted(tally.items())))
    for t in done:
        if t.problems:
            lines.append(f"  #{t.index} {t.fault}@{t.moment}+{t.delay_s}s {t.attempt_dir}: {'; '.join(t.problems)}")
    return "\n".join(lines)
