"""The fault matrix, shared by the fake-infrastructure suite and the real-cluster suite.

A cell is (fault, state): the plan is changed so the fault happens in that state, or an outside
action (signal, scancel) is taken once the attempt's journal shows the state."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import attrs

from dd_slurm.machine.journal import current_state, read_journal
from dd_slurm.store.cleanup_report import read_report
from dd_slurm.store.readiness import is_terminal, validate_record


@attrs.frozen
class Cell:
    fault: str
    state: str
    plan: str
    mutate: Callable[[dict], None]
    expected: tuple[str, str]
    action: Optional[str] = None  # "sigterm", "sigusr1", "scancel", or None

    @property
    def id(self) -> str:
        return f"{self.fault}@{self.state}"


def dep_args(index: int, *extra: str, key: str = "argv") -> Callable[[dict], None]:
    return lambda d: d["deployments"][index][key].extend(extra)


def client_args(*extra: str, key: str = "argv") -> Callable[[dict], None]:
    return lambda d: d["client"][key].extend(extra)


def both(*changes: Callable[[dict], None]) -> Callable[[dict], None]:
    def apply(d: dict) -> None:
        for change in changes:
            change(d)

    return apply


def setting(path: tuple, value) -> Callable[[dict], None]:
    def apply(d: dict) -> None:
        target = d
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return apply


SLOW_LOAD = dep_args(0, "--load-time", "6")
SLOW_CLIENT = client_args("--sleep", "8")
SLOW_PREFLIGHT = client_args("--sleep", "8", key="preflight_argv")
CANCELLED, TIMED_OUT = ("cancelled", "sigterm"), ("timed_out", "pre_timeout_signal")

CELLS = [
    Cell("server_exits_while_loading", "deploying", "single-node", dep_args(0, "--fail-loading", "--exit-code", "3"),
         ("failed", "server_exited_while_loading")),
    Cell("server_crashes_after_ready", "client", "single-node",
         both(dep_args(0, "--crash-after-s", "2"), SLOW_CLIENT), ("failed", "server_crashed")),
    Cell("follower_dies", "deploying", "two-deployments", dep_args(0, "--die-after-s", "0.3", key="follower_argv"),
         ("failed", "follower_exited")),
    Cell("follower_dies", "client", "two-deployments",
         both(dep_args(0, "--die-after-s", "3", key="follower_argv"), SLOW_CLIENT), ("failed", "follower_exited")),
    Cell("client_exits_nonzero", "client", "single-node", client_args("--exit-code", "3"), ("failed", "client_failed")),
    # No preflight here: client.timeout_s bounds it too, and starting it can take longer than 1.5 s.
    Cell("client_hangs", "client", "single-node", both(client_args("--hang"), setting(("client", "timeout_s"), 1.5),
                                                       setting(("client", "preflight_argv"), None)),
         ("failed", "client_timeout")),
    Cell("preflight_fails", "preflight", "single-node", client_args("--exit-code", "2", key="preflight_argv"),
         ("failed", "preflight_failed")),
    Cell("readiness_never_comes", "deploying", "single-node",
         both(dep_args(0, "--never-healthy"), setting(("deployments", 0, "ready_timeout_s"), 1.5)),
         ("timed_out", "readiness_timeout")),
    Cell("deployment_cannot_launch", "deploying", "two-deployments", lambda d: None, ("failed", "launch_failed"),
         action="break_launch"),
    Cell("scancel", "preflight", "single-node", SLOW_PREFLIGHT, CANCELLED, action="scancel"),
    Cell("scancel", "deploying", "single-node", SLOW_LOAD, CANCELLED, action="scancel"),
    Cell("scancel", "client", "two-deployments", SLOW_CLIENT, CANCELLED, action="scancel"),
    Cell("sigterm", "deploying", "two-deployments", SLOW_LOAD, CANCELLED, action="sigterm"),
    Cell("sigterm", "client", "single-node", SLOW_CLIENT, CANCELLED, action="sigterm"),
    Cell("sigusr1", "deploying", "single-node", SLOW_LOAD, TIMED_OUT, action="sigusr1"),
    Cell("sigusr1", "client", "two-deployments", SLOW_CLIENT, TIMED_OUT, action="sigusr1"),
    # One replica of three fails while the client runs: a crash, and a hang that /health cannot see.
    Cell("replica_crashes", "client", "replicas",
         both(dep_args(0, "--crash-after-s", "2", "--faults-for", "deploy-small-1"), SLOW_CLIENT),
         ("failed", "server_crashed")),
    Cell("replica_stalls", "client", "replicas",
         both(dep_args(0, "--stall-after-requests", "0", "--faults-for", "deploy-small-1"),
              setting(("gateway",), {"stall_timeout_s": 1.5})), ("failed", "server_stalled")),
    # The same with min_replicas below replicas: the replica is lost and the attempt goes on; or,
    # with none to spare, it fails replicas_below_min.
    Cell("replica_crashes_tolerated", "client", "replicas",
         both(dep_args(0, "--crash-after-s", "2", "--faults-for", "deploy-small-1"), SLOW_CLIENT,
              setting(("deployments", 0, "min_replicas"), 2)), ("succeeded", "ok")),
    Cell("replica_stalls_tolerated", "client", "replicas",
         both(dep_args(0, "--stall-after-requests", "0", "--faults-for", "deploy-small-1"), client_args("--retries", "3"),
              setting(("gateway",), {"stall_timeout_s": 1.5}), setting(("deployments", 0, "min_replicas"), 2)),
         ("succeeded", "ok")),
    Cell("replica_crashes_restarted", "client", "replicas",
         both(dep_args(0, "--crash-after-s", "2", "--faults-for", "deploy-small-1"), SLOW_CLIENT,
              setting(("deployments", 0, "restart"), {"max": 1, "backoff_s": 0.5})), ("succeeded", "ok")),
    # Lost while loading and restarted before any replica was ready: the restarted replica is
    # proven ours against its new leader step (a fresh-clone run once checked it against the old one).
    Cell("replica_fails_loading_restarted", "deploying", "replicas",
         both(dep_args(0, "--fail-loading", "--faults-for", "deploy-small-1"),
              setting(("deployments", 0, "restart"), {"max": 1, "backoff_s": 0.5})), ("succeeded", "ok")),
    Cell("replica_crashes_below_min", "client", "replicas",
         both(dep_args(0, "--crash-after-s", "2", "--faults-for", "deploy-small-1"), SLOW_CLIENT,
              setting(("deployments", 0, "min_replicas"), 3)), ("failed", "replicas_below_min")),
    Cell("sigterm_during_cleanup", "cleanup", "single-node",
         both(dep_args(0, "--ignore-sigterm-s", "30"), client_args("--exit-code", "3")), ("failed", "client_failed"),
         action="sigterm"),
]


def wait_for_state(attempt_dir: Path, state: str, seconds: float, clock_sleep) -> None:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if current_state(read_journal(attempt_dir / "journal.jsonl"), "staged") in (state, "done"):
            return
        clock_sleep(0.05)
    raise AssertionError(f"the attempt never reached {state}")


def check_cell_aftermath(attempt_dir: Path, cell: Cell, leftovers: list) -> None:
    """What must hold after every cell (issue 7)."""
    entries = read_journal(attempt_dir / "journal.jsonl")
    moves = [(e["from"], e["to"]) for e in entries if e["kind"] == "transition"]
    end = [e for e in entries if e["kind"] == "transition"][-1]
    assert (moves[-1][1], end["outcome"], end["reason"]) == ("done", *cell.expected), (cell.id, moves, end)
    assert 1 == sum(1 for _a, b in moves if b == "cleanup"), moves
    assert all(a[1] == b[0] for a, b in zip(moves, moves[1:])), moves
    readiness_path = attempt_dir / "readiness.json"
    if readiness_path.exists():
        readiness = json.loads(readiness_path.read_text())
        assert ([], True) == (validate_record(readiness), is_terminal(readiness)), readiness
    report = read_report(attempt_dir / "cleanup.json")  # validated: the typed record reads what cleanup wrote
    tracked = json.loads((attempt_dir / "processes.json").read_text())["processes"]
    assert report is not None, attempt_dir
    assert {p["name"] for p in tracked} == {p.name for p in report.processes}
    assert all(p["exit_code"] is not None for p in json.loads((attempt_dir / "processes.json").read_text())["processes"])
    assert [] == leftovers, leftovers
    if cell.fault.startswith("replica_") and cell.expected != ("failed", "server_crashed") and \
            cell.expected != ("failed", "server_stalled"):
        losses = [(e["trigger"], e["replica"]) for e in entries if e["kind"] == "event"]
        restarted = [("restart_replica", "small-1")] if "restarted" in cell.fault else []
        assert [("lose_replica", "small-1"), *restarted] == losses, entries
    if cell.fault == "sigterm_during_cleanup":
        assert ["sigterm"] == [e.get("ignored_reason") for e in entries if e["kind"] == "internal"
                               and e.get("ignored_reason")]
