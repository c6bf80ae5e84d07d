"""`make bench`: every benchmark the issues name, one table, JSON under bench/results/.

Timings are medians over several runs; comparisons with the reference implementation
(data-designer-slurm 1.0.0rc1, installed into bench/.refenv, never a project dependency) are ratios
measured in the same run. Runtime figures need the lab cluster (make cluster-up)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results"
REFENV = ROOT / "bench" / ".refenv"
REFERENCE = "data-designer-slurm==1.0.0rc1"
STATES = ["COMPLETED", "FAILED", "RUNNING", "PENDING", "CANCELLED by 0", "TIMEOUT"]

sys.path.insert(0, str(ROOT))

from tests.bench.sizes import FULL, QUICK, Sizes  # noqa: E402  (ROOT on the path first)


def row(figure: str, values: list[float], unit: str, goal: str, note: str = "") -> dict:
    values = [v for v in values if v is not None]
    return {"figure": figure, "median": statistics.median(values) if values else None, "min": min(values, default=None),
            "max": max(values, default=None), "runs": len(values), "unit": unit, "goal": goal, "note": note}


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def inputs(rows: int = FULL.parse_rows) -> dict[str, str]:
    ids = [f"{1000 + i // 10}_{i % 10}" for i in range(rows)]
    return {
        # our formats carry each row's raw job id (squeue %A, sacct JobIDRaw)
        "sacct_ours": "".join(f"{j}|{200_000 + i}|{STATES[i % 6]}|{i % 3}:0|None|job-{i // 10}\n"
                              for i, j in enumerate(ids)),
        "squeue_ours": "".join(f"{j}|{200_000 + i}|RUNNING|None|job-{i // 10}\n" for i, j in enumerate(ids)),
        "sacct_theirs": "".join(f"{j}|{STATES[i % 6].split()[0]}|{i % 3}:0\n" for i, j in enumerate(ids)),
        "squeue_theirs": "".join(f"{j}|RUNNING\n" for j in ids),
    }


def reference_python() -> str | None:
    python = REFENV / "bin" / "python"
    if not python.exists():
        print(f"bench: installing {REFERENCE} into {REFENV} (its own throwaway environment)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(REFENV)], check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--pre", REFERENCE], capture_output=True)
        if done.returncode != 0:
            print(f"bench: could not install {REFERENCE}; comparisons skipped", file=sys.stderr)
            return None
    return str(python)


THEIR_PARSE = """
import sys, time, json
from data_designer.slurm.launcher.parsing import parse_accounting, parse_queue
sacct, squeue, runs = open(sys.argv[1]).read(), open(sys.argv[2]).read(), int(sys.argv[3])
out = {"sacct": [], "squeue": []}
for _ in range(runs):
    t = time.perf_counter(); parse_accounting(sacct); out["sacct"].append(time.perf_counter() - t)
    t = time.perf_counter(); parse_queue(squeue); out["squeue"].append(time.perf_counter() - t)
print(json.dumps(out))
"""


def parse_benchmarks(data: dict[str, str], ref: str | None, tmp: Path, sizes: Sizes = FULL) -> list[dict]:
    from dd_slurm.scheduler import parse

    runs = 1 if sizes.quick else 5
    ours = {"sacct": timed(lambda: parse.parse_sacct(data["sacct_ours"], raw_ids=True), runs),
            "squeue": timed(lambda: parse.parse_squeue(data["squeue_ours"], raw_ids=True), runs)}
    theirs = {"sacct": [], "squeue": []}
    if ref:
        (tmp / "sacct").write_text(data["sacct_theirs"])
        (tmp / "squeue").write_text(data["squeue_theirs"])
        done = subprocess.run([ref, "-c", THEIR_PARSE, str(tmp / "sacct"), str(tmp / "squeue"), "3"],
                              capture_output=True, text=True)
        theirs = json.loads(done.stdout) if done.returncode == 0 else theirs
    rows = []
    for tool, goal in (("sacct", "< 0.3 s; >= 5x faster"), ("squeue", ">= 5x faster")):
        ratio = statistics.median(theirs[tool]) / statistics.median(ours[tool]) if theirs[tool] else None
        rows.append(row(f"parse {sizes.parse_rows:,} {tool} rows (ours)", ours[tool], "s", goal,
                        f"reference x{ratio:.1f} slower" if ratio else "reference not measured"))
        rows.append(row(f"parse {sizes.parse_rows:,} {tool} rows (reference)", theirs[tool], "s", "",
                        "its own format, same rows" if ref else "skipped: no reference (quick mode)"))
    return rows


def render_benchmark(sizes: Sizes = FULL) -> dict:
    from dd_slurm.plan.io import load_plan
    from dd_slurm.scheduler.render import ScriptContext, render_script

    plan = load_plan(ROOT / "fixtures" / "plans" / "two-deployments.json")
    ctx = ScriptContext("bench-1", "/ws/attempts/bench-1", "/ws/bundles/b", "b" * 64, "p" * 64, entry_sha256="e" * 64)
    calls = 2 if sizes.quick else 200
    per_call = [t / calls * 1000 for t in timed(lambda: [render_script(plan, ctx) for _ in range(calls)],
                                                1 if sizes.quick else 7)]
    return row("render one attempt script", per_call, "ms", "reference: about 0.7 ms",
               "reference figure quoted from the issue, not re-measured (its plan needs its whole config compiler)")


def calls_per_round(sizes: Sizes = FULL) -> list[dict]:
    from dd_slurm.clock import Clock
    from dd_slurm.scheduler.commands import SlurmCommands
    from dd_slurm.testing.fake_slurm import fake_cluster

    rows = []
    with tempfile.TemporaryDirectory() as tmp, fake_cluster(tmp) as fake:
        commands = SlurmCommands(Clock(), str(fake.bin_dir), {})
        for count in sizes.jobs:
            result = commands.query([str(10**6 + i) for i in range(count)])
            rows.append(row(f"scheduler calls per status round, {count:,} jobs", [result.calls], "calls", "2"))
        for count in sizes.array_ids:
            ids = [f"777_{i}" for i in range(1, count + 1)]
            seconds = timed(lambda ids=ids: commands.query(ids), min(sizes.runs, 3))
            rows.append(row(f"status round for {count:,} array task ids", seconds, "s", "works (reference fails > ~11,000)",
                            f"{commands.query(ids).calls} calls"))
    return rows


def fresh_process(argv: list[str], env: dict | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one fresh process. RSS comes from GNU time, a small
    parent: a child forked by this (large) process would count pages it shares with us."""
    gnu_time = Path("/usr/bin/time")
    wrapped = [str(gnu_time), "-f", "%M", *argv] if gnu_time.exists() else argv
    start = time.perf_counter()
    proc = subprocess.run(wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    elapsed = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1:] or ["0"]
    return elapsed, int(last[0]) if gnu_time.exists() and last[0].isdigit() else 0


def startup_benchmarks(ref: str | None, sizes: Sizes = FULL) -> list[dict]:
    from dd_slurm.testing.fake_slurm import fake_cluster

    with tempfile.TemporaryDirectory() as tmp, fake_cluster(tmp) as fake:
        return _startup_rows(fake, tmp, ref, sizes)


def _startup_rows(fake, tmp: str, ref: str | None, sizes: Sizes) -> list[dict]:
    rows = []
    env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake.bin_dir)}
    exe = str(Path(sys.executable).parent / "dd-slurm")
    out = subprocess.run([exe, "submit", "--json", str(ROOT / "fixtures" / "plans" / "single-node.json"), "-w",
                          f"{tmp}/ws"], env=env, capture_output=True, text=True, check=True)
    attempt = json.loads(out.stdout)["attempt_dir"]
    ours = [fresh_process([exe, "status", "--json", attempt], env) for _ in range(sizes.runs)]
    theirs = []
    if ref:
        their_exe = str(Path(ref).parent / "data-designer")
        theirs = [fresh_process([their_exe, "slurm", "status", "--help"]) for _ in range(min(sizes.runs, 5))]
    ratio = statistics.median(t for t, _ in theirs) / statistics.median(t for t, _ in ours) if theirs else None
    rows.append(row("dd-slurm status --json, fresh process, fake Slurm", [t * 1000 for t, _ in ours], "ms",
                    "< 150 ms; >= 8x faster", (f"reference x{ratio:.1f} slower; " if ratio else "")
                    + "the fake squeue/sacct are Python scripts, ~40 ms each"))
    rows.append(row("dd-slurm status --json, peak RSS (with fake tools)", [r / 1024 for _, r in ours], "MiB", ""))
    helps = [fresh_process([exe, "status", "--help"]) for _ in range(sizes.runs)]
    like = statistics.median(t for t, _ in theirs) / statistics.median(t for t, _ in helps) if theirs else None
    rows.append(row("dd-slurm status --help, fresh process (like for like)", [t * 1000 for t, _ in helps], "ms",
                    ">= 8x faster", f"reference x{like:.1f} slower" if like else ""))
    rows.append(row("reference `data-designer slurm status --help`", [t * 1000 for t, _ in theirs], "ms", "",
                    f"peak RSS {statistics.median(r for _, r in theirs) / 1024:.0f} MiB" if theirs
                    else "skipped: no reference (quick mode)"))
    record = Path(attempt) / "attempt.json"
    data = json.loads(record.read_text())
    history = [{"time": 1.0 * i, "job_id": data["job_id"], "state": "running", "terminal": False, "exit_code": None,
                "signal": None, "raw_state": "RUNNING", "source": "squeue", "reason": None}
               for i in range(sizes.history_rows)]
    big = []
    for _ in range(min(sizes.runs, 3)):
        record.write_text(json.dumps({**data, "observations": history}))
        big.append(fresh_process([exe, "status", "--json", attempt], env))
    rows.append(row(f"status with a {sizes.history_rows:,}-row history: time", [t * 1000 for t, _ in big], "ms", "",
                    f"peak RSS {statistics.median(r for _, r in big) / 1024:.0f} MiB; history is then cut to 50"))
    return rows


def _journal_times(attempt: Path) -> dict[tuple[str, str], float]:
    entries = [json.loads(line) for line in (attempt / "journal.jsonl").read_text().splitlines()]
    return {(e["from"], e["to"]): e["ts"] for e in entries if e["kind"] == "transition"}


def _serving_since(log: Path) -> float:
    line = next(l for l in log.read_text().splitlines() if " since " in l)
    return float(line.rsplit(" since ", 1)[1])


def _process_start_wall(started_record: Path) -> float:
    """Wall-clock start of a step's program: its release for a held step (launched while the
    preflight ran), else its process start from the start ticks its launcher recorded (this
    machine's boot clock; 10 ms resolution)."""
    record = json.loads(started_record.read_text())
    if "released_at" in record:
        return record["released_at"]
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - record["start_time"] / os.sysconf("SC_CLK_TCK"))


def cluster_down(sizes: Sizes) -> str | None:
    """Why the lab cluster's rows are skipped, None when its `sinfo` answers."""
    if sizes.clusters_down:
        return "skipped: the test run's clusters are down (DD_SLURM_TEST_CLUSTER=down)"
    if subprocess.run(["timeout", "5", "sinfo", "-h"], capture_output=True).returncode != 0:
        return "skipped: the lab cluster is not up (make cluster-up)"
    return None


def lab_status_benchmarks(sizes: Sizes = FULL) -> list[dict]:
    """`dd-slurm status --json` against the lab cluster: a held (live) job, then a finished one."""
    if down := cluster_down(sizes):
        return [row("status on the lab cluster", [], "", "", down)]
    exe = str(Path(sys.executable).parent / "dd-slurm")
    plan = json.loads((ROOT / "fixtures" / "plans" / "single-node.json").read_text())
    plan["runtime"]["python"] = "/bin/true"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "plan.json").write_text(json.dumps(plan))
        out = subprocess.run([exe, "submit", "--json", f"{tmp}/plan.json", "-w", f"{tmp}/ws"], capture_output=True,
                             text=True, check=True)
        submitted = json.loads(out.stdout)
        held = subprocess.run(["scontrol", "hold", submitted["job_id"]], capture_output=True).returncode == 0
        if held:
            live = [fresh_process([exe, "status", "--json", submitted["attempt_dir"]]) for _ in range(sizes.runs)]
            rows.append(row("status --json on the lab cluster, live job (squeue only)", [t * 1000 for t, _ in live],
                            "ms", "< 150 ms", f"peak RSS {statistics.median(r for _, r in live) / 1024:.0f} MiB"))
        subprocess.run(["scancel", submitted["job_id"]], capture_output=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            view = subprocess.run([exe, "status", "--json", submitted["attempt_dir"]], capture_output=True, text=True)
            if json.loads(view.stdout)["scheduler"]["source"] == "sacct":
                break
            time.sleep(1)
        counting, log = _counting_tools(Path(tmp))
        env = {**os.environ, "DD_SLURM_BIN_DIR": str(counting)}
        done = [fresh_process([exe, "status", "--json", submitted["attempt_dir"]], env) for _ in range(sizes.runs)]
        calls = len(log.read_text().splitlines()) if log.exists() else 0
        rows.append(row("status --json on the lab cluster, finished attempt", [t * 1000 for t, _ in done],
                        "ms", "< 80 ms; 0 scheduler calls",
                        f"{calls} scheduler calls in {len(done)} runs: sacct's terminal record is persisted"))
    return rows


def _counting_tools(directory: Path) -> tuple[Path, Path]:
    """A bin dir whose squeue/sacct/... log each call, then run the real tool."""
    import shutil

    bin_dir, log = directory / "counting-bin", directory / "calls.log"
    bin_dir.mkdir()
    for tool in ("sbatch", "squeue", "sacct", "scancel", "scontrol", "srun"):
        real = shutil.which(tool) or f"/usr/bin/{tool}"
        (bin_dir / tool).write_text(f'#!/bin/sh\necho {tool} >> "{log}"\nexec "{real}" "$@"\n')
        (bin_dir / tool).chmod(0o755)
    return bin_dir, log


def use_host_cluster() -> None:
    """submit() runs the cluster's tools: the one on PATH (the host's), unless a test chose one."""
    import shutil

    from tests.slurm import real_attempt
    from tests.slurm.clusters import Cluster, table

    if real_attempt.CLUSTER["current"] is None:
        host = next(v for v, r in table().items() if r["root"] == "host")
        real_attempt.CLUSTER["current"] = Cluster(host, str(Path(shutil.which("sinfo") or "/usr/bin/sinfo").parent),
                                                  table()[host]["net"])


def runtime_benchmarks(runs: int = 3, sizes: Sizes = FULL) -> list[dict]:
    if down := cluster_down(sizes):
        return [row("runtime figures", [], "", "", down)]
    from tests.runtime.harness import plan_data
    from tests.slurm.real_attempt import submit, wait_job_gone, wait_state

    use_host_cluster()
    load, grace = 2.0, 2.0
    found: dict[str, list[float]] = {"overhead": [], "own_load": [], "readiness": [], "cleanup": [], "ignoring": [],
                                     "rss": [], "cleanup_state": []}
    with tempfile.TemporaryDirectory() as tmp:
        for ignoring in (False, True):
            for run in range(runs):
                data = plan_data("single-node")
                argv = data["deployments"][0]["argv"]
                argv[argv.index("--load-time") + 1] = str(load)
                if ignoring:
                    argv += ["--ignore-sigterm-s", "60"]
                data["runtime"]["cleanup_grace_s"] = grace
                attempt, job = submit(Path(tmp), data, f"bench-{'ignoring' if ignoring else 'coop'}-{run}")
                wait_state(attempt, ("done",), 180)
                wait_job_gone(job)
                times = _journal_times(attempt)
                supervisor = json.loads((attempt / "supervisor.json").read_text())
                cleanup = times[("cleanup", "done")] - times[("client", "finalize")]
                if ignoring:
                    found["ignoring"].append(cleanup)
                    continue
                serving = _serving_since(attempt / "logs" / "deploy-small-0.log")
                own_load = serving - _process_start_wall(attempt / "steps" / "deploy-small-0.started.json")
                found["overhead"].append(times[("ready", "client")] - supervisor["started_at"] - load)
                found["own_load"].append(times[("ready", "client")] - supervisor["started_at"] - own_load)
                found["readiness"].append((times[("deploying", "ready")] - serving) * 1000)
                found["cleanup"].append(cleanup)
                found["cleanup_state"].append(times[("cleanup", "done")] - times[("finalize", "cleanup")])
                found["rss"].append(supervisor["peak_rss_kib"] / 1024)
    return [
        row("orchestration overhead: job start to client start, minus load time", found["overhead"], "s", "< 0.35 s",
            "includes python start-up, bundle verification, the node probe beside the preflight, step launches"),
        row("  ... minus the server's own load instead (its process start to /health 200)", found["own_load"], "s",
            "< 0.35 s", f"the fake server's interpreter and imports count as its load, not ours (configured load "
            f"{load:g} s); a held server's process starts at its release"),
        row("readiness detection after /health turns 200", found["readiness"], "ms", "< 250 ms"),
        row("cleanup, client exit to all processes gone (cooperative)", found["cleanup"], "s", "< 1 s"),
        row("  ... of which the cleanup state of this one-node attempt (entering cleanup to done)", found["cleanup_state"],
            "s", "< 0.2 s", "the leftover scans answered in-process on the supervisor's node, no scan step"),
        row(f"cleanup with a server ignoring SIGTERM (grace {grace:g} s)", found["ignoring"], "s", f"< {grace + 1:g} s"),
        row("supervisor peak RSS", found["rss"], "MiB", "< 60 MiB"),
    ]


def soak_benchmark(count: int = 30, sizes: Sizes = FULL) -> list[dict]:
    """The randomized soak (tests/slurm/soak.py) on the lab cluster: attempts that agreed, N/N."""
    if down := cluster_down(sizes):
        return [row("randomized soak", [], "", "", down)]
    import random

    from tests.slurm import real_attempt
    from tests.slurm.soak import soak

    seed = random.randrange(2 ** 31)
    real_attempt.PREFIX["current"] = f"bench{seed % 10000}-"
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        done, left = soak(Path(tmp), count, seed)
    agreed = sum(1 for t in done if not t.problems)
    return [row("randomized soak: attempts whose effective outcome agreed, nothing left", [agreed], f"of {count}",
                f"{count}/{count}", f"{agreed}/{count}; {len(left)} processes left; seed {seed}; "
                f"{time.monotonic() - started:.0f} s")]


def table(rows: list[dict]) -> str:
    def fmt(value) -> str:
        return "-" if value is None else f"{value:.3g}"

    lines = ["| figure | median | min | max | runs | unit | goal | note |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['figure']} | {fmt(r['median'])} | {fmt(r['min'])} | {fmt(r['max'])} | {r['runs']} | "
                     f"{r['unit']} | {r['goal']} | {r['note']} |")
    return "\n".join(lines)


def compile_package() -> None:
    """Bytecode for dd_slurm, as an installed package has it: with PYTHONDONTWRITEBYTECODE set (or
    a read-only checkout) every fresh process of the editable install would compile each module
    it imports, which is not what a user's `status` costs."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "dd_slurm")], check=True)


def main(argv: list[str]) -> int:
    """Every row; `--quick`: the quick mode (tests/bench/sizes.py), its JSON to `--out DIR`."""
    sizes = QUICK if "--quick" in argv else FULL
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else OUT
    machine = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": sizes.quick}
    compile_package()
    ref = None if sizes.quick else reference_python()
    with tempfile.TemporaryDirectory() as tmp:
        rows = parse_benchmarks(inputs(sizes.parse_rows), ref, Path(tmp), sizes)
    from tests.bench.scale import scale_benchmarks

    rows += [render_benchmark(sizes), *calls_per_round(sizes), *startup_benchmarks(ref, sizes),
             *lab_status_benchmarks(sizes), *runtime_benchmarks(sizes.runtime_runs, sizes), *scale_benchmarks(sizes),
             *soak_benchmark(sizes.soak_count, sizes)]
    from tests.bench.bench_gateway import gateway_benchmarks

    rows += gateway_benchmarks(row, sizes)
    from tests.bench.bench_loss import loss_benchmarks
    from tests.bench.bench_metrics import metrics_cost, running_status

    rows += loss_benchmarks(row, sizes)
    rows += metrics_cost(row, sizes)
    rows += running_status(row, sizes, fresh_process, cluster_down)
    from tests.bench.bench_weights import source_reads, staging_throughput

    rows += staging_throughput(row, sizes)
    rows += source_reads(row, sizes, cluster_down)
    text = table(rows)
    print(f"machine: {machine}\n\n{text}")
    out.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine, "reference": REFERENCE, "rows": rows}
    (out / f"bench-{machine['when']}.json").write_text(json.dumps(report, indent=1))
    (out / "latest.json").write_text(json.dumps(report, indent=1))
    (out / "latest.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
