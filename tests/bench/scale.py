"""Scale benchmarks on fake Slurm (it describes allocations far larger than the lab): a 1,000-shard
array `submit`, `list` over 10,000 finished attempts, and a 64-node x 8-GPU allocation serving 128
single-GPU replicas plus 8 two-node deployments. Rows in `make bench`'s table."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.sizes import FULL, Sizes  # noqa: E402  (ROOT on the path first)

EXE = str(Path(sys.executable).parent / "dd-slurm")


def _row(figure: str, values: list, unit: str, goal: str, note: str = "") -> dict:
    from tests.bench.bench import row

    return row(figure, values, unit, goal, note)


def _plan(name: str, **job: object) -> dict:
    data = json.loads((ROOT / "fixtures" / "plans" / "single-node.json").read_text())
    data["name"] = name
    data["job"].update(job)
    return data


def _run(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[1]} failed: {done.stderr.strip()[:300]}")
    return time.perf_counter() - start, done


def array_submit(runs: int = 3, count: int = 1000) -> dict:
    """`dd-slurm submit` of a 1,000-shard plan from a fresh process: bundle, run dir, 1,000 shard
    dirs, one sbatch. The tasks' interpreter is /bin/true and the run is cancelled at once."""
    from dd_slurm.testing.fake_slurm import fake_cluster

    seconds = []
    with tempfile.TemporaryDirectory() as tmp, fake_cluster(tmp) as fake:
        env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake.bin_dir)}
        data = _plan("bench-array", array={"count": count, "max_concurrent": 2})
        data["runtime"]["python"] = "/bin/true"
        (Path(tmp) / "plan.json").write_text(json.dumps(data))
        for _ in range(runs + 1):
            took, done = _run([EXE, "submit", "--json", f"{tmp}/plan.json", "-w", f"{tmp}/ws"], env)
            seconds.append(took)
            _run([EXE, "cancel", json.loads(done.stdout)["attempt_dir"]], env)
        calls = len(fake.calls("sbatch"))
    return _row(f"submit of a {count:,}-shard array, fresh process, fake Slurm", seconds[1:], "s", "< 5 s",
                f"{calls // (runs + 1)} sbatch call per submit; the first, which also staged the bundle: "
                f"{seconds[0]:.2f} s")


def finished_workspace(ws: Path, count: int) -> None:
    """`count` finished attempts, as a supervisor and `status` leave them: a journal ending in done,
    a record whose last observation is sacct's terminal answer."""
    journal = []
    for seq, (src, dst) in enumerate(zip(["staged", "verified", "preflight", "deploying", "ready", "client",
                                          "finalize", "cleanup"],
                                         ["verified", "preflight", "deploying", "ready", "client", "finalize",
                                          "cleanup", "done"])):
        entry = {"seq": seq, "kind": "transition", "from": src, "to": dst, "trigger": "t", "ts": 1.0 + seq,
                 "time": "2026-01-01T00:00:00+00:00"}
        if dst in ("cleanup", "done"):
            entry.update(outcome="succeeded", reason="ok")
        journal.append(json.dumps(entry, sort_keys=True))
    journal_bytes = ("\n".join(journal) + "\n").encode()
    for i in range(count):
        attempt = ws / "attempts" / f"bench-20260101T000000-{i:06x}"
        attempt.mkdir(parents=True)
        (attempt / "journal.jsonl").write_bytes(journal_bytes)
        obs = {"time": 2.0, "job_id": str(5000 + i), "state": "completed", "terminal": True, "exit_code": 0,
               "signal": None, "raw_state": "COMPLETED", "source": "sacct", "reason": None}
        (attempt / "attempt.json").write_text(json.dumps(
            {"attempt_id": attempt.name, "job_id": str(5000 + i), "submitted_at": 1.0, "staged_at": 1.0,
             "last_seen": 2.0, "observations": [{**obs, "state": "running", "terminal": False,
                                                 "source": "squeue", "raw_state": "RUNNING"}, obs],
             "cancel_requests": [], "reconcile_deadline_s": 300}))


def list_finished(runs: int = 5, count: int = 10_000) -> list[dict]:
    from dd_slurm.testing.fake_slurm import fake_cluster

    with tempfile.TemporaryDirectory() as tmp, fake_cluster(tmp) as fake:
        env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake.bin_dir)}
        finished_workspace(Path(tmp) / "ws", count)
        cold = [_run([EXE, "list", "--json", "-w", f"{tmp}/ws"], env)[0]]
        warm = [_run([EXE, "list", "--json", "-w", f"{tmp}/ws"], env)[0] for _ in range(runs)]
        calls = len(fake.calls("squeue")) + len(fake.calls("sacct"))
    return [_row(f"list over {count:,} finished attempts, fresh process", warm, "s", "< 1 s",
                 f"{calls} scheduler calls in {runs + 1} runs; settled rows come from attempts/.list-cache.json"),
            _row("  ... the first list (reads every attempt dir, writes the cache)", cold, "s", "",
                 "20,000 small files read and parsed")]


def replicas_supported() -> bool:
    """Whether the runtime launches every replica (not only replica 0 of each deployment)."""
    from dd_slurm.runtime import actions, session

    return any("place_replicas" in inspect.getsource(module) for module in (actions, session))


def big_allocation_plan(load_s: float, nodes: int = 64) -> dict:
    """`nodes` x 8 GPUs: 2 single-GPU replicas per node and a two-node pair per 8 nodes (one at least)."""
    data = _plan("bench-big", nodes=nodes, gpus_per_node=8, time_limit="00:30:00", pre_timeout_signal_s=0)
    small = data["deployments"][0]
    argv = small["argv"]
    argv[argv.index("--load-time") + 1] = str(load_s)
    argv.insert(1, "-S")  # no site module: the fake server needs the standard library only
    small.update(name="small", gpus_per_node=1, replicas=2 * nodes, port=None, ready_timeout_s=300)
    deployments = [small]
    for k in range(max(1, nodes // 8)):  # each pair on its own two nodes, so one coordination port serves them all
        coord = ["--coord-port", "18402"]
        leader = [*argv[:3], "--port", "{port}", "--model", f"pair-{k}", "--role", "leader", "--num-nodes",
                  "{num_nodes}", *coord, "--host", "{host}", "--load-time", str(load_s)]
        follower = [*argv[:3], "--role", "follower", "--leader", "{leader_host}", *coord, "--node-rank", "{node_rank}"]
        deployments.append({**small, "name": f"pair{k}", "model_alias": f"pair-{k}", "nodes": 2, "gpus_per_node": 8,
                            "replicas": 1, "argv": leader, "follower_argv": follower})
    data["deployments"] = deployments
    data["runtime"]["cleanup_grace_s"] = 5
    return data


def big_allocation(load_s: float = 3.0, nodes: int = 64) -> list[dict]:
    """64 nodes x 8 GPUs: 128 single-GPU replicas and 8 two-node deployments (136 deployments'
    worth of servers). Overhead = job start to client start minus load time, plus cleanup. On fake
    Slurm every node's processes run on this machine, so the row also says how much CPU they took
    (on a real allocation they run side by side on 64 nodes) and what is left of the overhead when
    that CPU, spread over this machine's cores, is taken out."""
    pairs = max(1, nodes // 8)
    figure = f"{nodes}-node x 8-GPU allocation, {2 * nodes} replicas + {pairs} two-node deployments: overhead beyond load"
    if not replicas_supported():
        return [_row(figure, [], "s", "< 3 s", "skipped: the runtime does not launch `replicas` yet"),
                _row("  ... supervisor peak RSS", [], "MiB", "< 80 MiB", "skipped: as above")]
    from dd_slurm.testing.fake_slurm import fake_cluster

    with tempfile.TemporaryDirectory() as tmp, fake_cluster(tmp) as fake:
        env = {**os.environ, "DD_SLURM_BIN_DIR": str(fake.bin_dir)}
        (Path(tmp) / "plan.json").write_text(json.dumps(big_allocation_plan(load_s, nodes)))
        _, done = _run([EXE, "submit", "--json", f"{tmp}/plan.json", "-w", f"{tmp}/ws"], env)
        attempt = Path(json.loads(done.stdout)["attempt_dir"])
        _run([EXE, "status", "--watch", "--interval", "1", str(attempt)], env)
        entries = [json.loads(line) for line in (attempt / "journal.jsonl").read_text().splitlines()]
        times = {(e["from"], e["to"]): e["ts"] for e in entries if e["kind"] == "transition"}
        supervisor = json.loads((attempt / "supervisor.json").read_text())
        servers_cpu = sum(_startup_cpu(log) for log in (attempt / "logs").glob("deploy-*.log"))
        end = entries[-1]
    if end.get("outcome") != "succeeded":
        return [_row(figure, [], "s", "< 3 s", f"the attempt ended {end.get('outcome')} ({end.get('reason')})")]
    overhead = times[("ready", "client")] - supervisor["started_at"] - load_s
    overhead += times[("cleanup", "done")] - times[("finalize", "cleanup")]
    phases = {"verify": times[("staged", "verified")] - supervisor["started_at"],
              "preflight": times[("preflight", "deploying")] - times[("staged", "verified")],
              "deploy-ready": times[("deploying", "ready")] - times[("preflight", "deploying")],
              "cleanup": times[("cleanup", "done")] - times[("finalize", "cleanup")]}
    note = ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
    cpu, cores = supervisor.get("cpu_s") or {}, os.cpu_count() or 1
    steps_cpu = cpu.get("children", 0.0)
    return [_row(figure, [overhead], "s", "< 3 s", f"fake model servers (load {load_s:g} s); {note}"),
            _row(f"  ... the same less the steps' CPU spread over this machine's {cores} cores", [
                overhead - steps_cpu / cores], "s", "", f"steps' processes (fake srun, on-node commands, servers, "
                f"gateway, client) {steps_cpu:.1f} CPU-s, of which the servers' own start-up {servers_cpu:.1f}; "
                f"supervisor {cpu.get('self', 0.0):.1f} CPU-s; at or below 0: the overhead is all the simulated nodes' "
                "CPU (some of it, the client's and the servers' serving, falls outside the overhead's windows)"),
            _row("  ... supervisor peak RSS", [supervisor["peak_rss_kib"] / 1024], "MiB", "< 80 MiB")]


def _startup_cpu(log: Path) -> float:
    """The CPU a fake model server used before it served (its `start-up cpu` line), 0 if none."""
    for line in log.read_text(errors="replace").splitlines():
        if "start-up cpu " in line:
            return float(line.rsplit("start-up cpu ", 1)[1].rstrip("s"))
    return 0.0


def scale_benchmarks(sizes: Sizes = FULL) -> list[dict]:
    return [array_submit(sizes.runtime_runs, sizes.array_shards), *list_finished(sizes.runs // 2 or 1,
                                                                                 sizes.finished_attempts),
            *big_allocation(1.0 if sizes.quick else 3.0, sizes.big_nodes)]


if __name__ == "__main__":
    from tests.bench.bench import table

    print(table(scale_benchmarks()))
