"""The leftover scan, run on every node of the allocation (standard library only). Methods:

- environment: processes whose environment carries the attempt's DD_SLURM_ATTEMPT_ID;
- process_tree: the steps' recorded processes and their descendants (recorded on each node
  before cleanup stops anything; the launcher makes every step a child subreaper, so a daemon that
  double-forks stays in its step's tree);
- session: members of a step's recorded session or process group started after the step;
- cgroup: members of the job's cgroup, where Slurm gives steps one (proctrack/cgroup).

The answer names the methods that ran, so a clean verdict claims only what they can see.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from dd_slurm.runtime.node.procfs import ancestors, descendants, node_name, process_table, start_time
from dd_slurm.store import attempt_files as files  # standard library only, like this module
from dd_slurm.store.atomic import write_json_atomic

SKIP_ROLES = {"supervisor", "scan"}


def leftovers(attempt_id: str) -> list[dict]:
    """Processes on this node whose environment carries this attempt's id (not scans, not the
    supervisor, not this process)."""
    return [p for p in _environment_matches(attempt_id, process_table())]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _environment_matches(attempt_id: str, table: dict[int, dict]) -> list[dict]:
    wanted = f"DD_SLURM_ATTEMPT_ID={attempt_id}".encode()
    found = []
    for pid, info in table.items():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted not in environ:
            continue
        role = next((v[len(b"DD_SLURM_ROLE="):].decode() for v in environ if v.startswith(b"DD_SLURM_ROLE=")), "")
        cmdline = _cmdline(pid)
        if role in SKIP_ROLES or not cmdline:
            continue
        found.append({"pid": pid, "start_time": info["start_time"], "role": role, "cmdline": cmdline[:200]})
    return found


def _my_steps(attempt_dir: str, node: str) -> list[dict]:
    """What the on-node launcher recorded for this node's steps (validated: read back from disk)."""
    found = []
    for path in sorted(Path(attempt_dir, files.STEPS_DIR).glob(f"*{files.STARTED_SUFFIX}")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (isinstance(record, dict) and record.get("node") == node and isinstance(record.get("pid"), int)
                and isinstance(record.get("start_time"), int)):
            found.append({"name": str(record.get("name")), "pid": record["pid"], "start_time": record["start_time"]})
    return found


def record_trees(attempt_dir: str, node: str | None = None) -> dict:
    """Before cleanup stops anything: this node's live step processes, their descendants (orphans
    stay in the tree: the launcher made each step a child subreaper) and their sessions."""
    node, table = node or node_name(), process_table()
    live = [s for s in _my_steps(attempt_dir, node) if table.get(s["pid"], {}).get("start_time") == s["start_time"]]
    members = descendants({s["pid"] for s in live}, table) | {s["pid"] for s in live}
    sessions = [{"sid": table[s["pid"]]["sid"], "pgid": table[s["pid"]]["pgid"], "since": s["start_time"]} for s in live]
    record = {"node": node, "tree": [{"pid": p, "start_time": table[p]["start_time"]} for p in sorted(members)],
              "sessions": sessions}
    write_json_atomic(files.tree_record(attempt_dir, node), record)
    return {"node": node, "recorded": len(record["tree"])}


def _recorded(attempt_dir: str, node: str) -> dict:
    try:
        record = json.loads(files.tree_record(attempt_dir, node).read_text())
        tree = [(int(p["pid"]), int(p["start_time"])) for p in record["tree"]]
        sessions = [(int(s["sid"]), int(s["pgid"]), int(s["since"])) for s in record["sessions"]]
        return {"tree": tree, "sessions": sessions}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _cgroup_members(table: dict[int, dict]) -> tuple[set[int], str]:
    """Processes in this job's cgroup outside this scan's own step, where Slurm gives steps cgroups
    (proctrack/cgroup); otherwise why not."""
    job = os.environ.get("SLURM_JOB_ID", "")
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return set(), "unavailable: no /proc/self/cgroup"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        marker = f"/job_{job}/"
        if job and marker in path + "/":
            base = Path("/sys/fs/cgroup", controllers.split(",")[0].replace("name=", "") if controllers else "")
            job_dir = base / path.lstrip("/").split(marker.strip("/"))[0] / marker.strip("/")
            own = Path(path).name
            members = set()
            for procs in job_dir.rglob("cgroup.procs"):
                if own in procs.parts or "step_batch" in procs.parts:
                    continue
                members |= {int(p) for p in procs.read_text().split() if p.isdigit()}
            return members & set(table), f"ran: {job_dir}"
    return set(), "unavailable: this node does not put steps in cgroups (no job_ path in /proc/self/cgroup)"


def scan_node(attempt_id: str, kill: bool, attempt_dir: str = "", node: str | None = None) -> dict:
    """This node's leftovers, found by every method available here, SIGKILLed when asked (only if
    still the same process, by start time)."""
    table, node = process_table(), node or node_name()
    found = {p["pid"]: {**p, "seen_by": ["environment"]} for p in _environment_matches(attempt_id, table)}
    methods = {"environment": "ran"}
    if attempt_dir:
        _by_tree_and_session(attempt_dir, node, table, found, methods)
    members, methods["cgroup"] = _cgroup_members(table)
    for pid in members:
        _note(found, pid, table, "cgroup")
    _drop_not_ours(found, table)
    containers = enroot_leftovers(os.environ.get("SLURM_JOB_ID", ""), kill) if _used_images(attempt_dir) else None
    if containers is not None:
        methods["enroot"] = containers.pop("method")
    killed = []
    for proc in found.values() if kill else ():
        if start_time(proc["pid"]) == proc["start_time"]:
            try:
                os.kill(proc["pid"], signal.SIGKILL)
                killed.append(proc["pid"])
            except OSError:
                pass
    answer = {"node": node, "found": sorted(found.values(), key=lambda p: p["pid"]), "killed": killed, "methods": methods}
    return {**answer, **(containers or {})}


def _used_images(attempt_dir: str) -> bool:
    return bool(attempt_dir) and Path(attempt_dir, files.IMAGES).exists()


def enroot_leftovers(job_id: str, remove: bool, path: str | None = None) -> dict:
    """This job's enroot containers on this node (pyxis names them pyxis_JOB.STEP, or pyxis_JOB_...
    with a job-scoped name), removed when asked: pyxis removes each at its step's end, unless its
    slurmstepd died first."""
    import shutil
    import subprocess

    enroot = shutil.which("enroot", path=path or os.environ.get("PATH") or "/usr/local/bin:/usr/bin:/bin")
    if not job_id or enroot is None:
        return {"method": "unavailable: no enroot on this node" if job_id else "unavailable: no job id"}
    try:
        listed = subprocess.run([enroot, "list"], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"method": f"failed: enroot list: {err}"}
    found = [n for n in listed.stdout.split() if n.startswith((f"pyxis_{job_id}.", f"pyxis_{job_id}_"))]
    removed = [n for n in found if remove and subprocess.run([enroot, "remove", "-f", n], capture_output=True,
                                                              timeout=60, stdin=subprocess.DEVNULL).returncode == 0]
    return {"method": "ran", "containers_found": found, "containers_removed": removed}


def _by_tree_and_session(attempt_dir: str, node: str, table: dict[int, dict], found: dict, methods: dict) -> None:
    recorded = _recorded(attempt_dir, node)
    steps = [s for s in _my_steps(attempt_dir, node) if table.get(s["pid"], {}).get("start_time") == s["start_time"]]
    tree = {pid for pid, since in recorded.get("tree", []) if table.get(pid, {}).get("start_time") == since}
    tree |= {s["pid"] for s in steps}
    tree |= descendants(tree, table)
    for pid in tree:
        _note(found, pid, table, "process_tree")
    methods["process_tree"] = "ran" if recorded else "ran (live steps only: no tree was recorded before the stop)"
    sessions = recorded.get("sessions", [])
    for pid, info in table.items():
        for sid, pgid, since in sessions:
            if (info["sid"] == sid or info["pgid"] == pgid) and info["start_time"] >= since:
                _note(found, pid, table, "session")
    methods["session"] = "ran" if recorded else "skipped: no session was recorded before the stop"


def _note(found: dict, pid: int, table: dict[int, dict], method: str) -> None:
    if pid in found:
        if method not in found[pid]["seen_by"]:
            found[pid]["seen_by"].append(method)
        return
    found[pid] = {"pid": pid, "start_time": table[pid]["start_time"], "role": "", "cmdline": _cmdline(pid)[:200],
                  "seen_by": [method]}


def _drop_not_ours(found: dict, table: dict[int, dict]) -> None:
    """Never this scan, its ancestors (srun, slurmstepd), Slurm's daemons, or the supervisor."""
    mine = ancestors(os.getpid(), table)
    for pid in list(found):
        info = table.get(pid)
        if pid in mine or info is None or info["comm"].startswith("slurm") or pid == 1:
            del found[pid]
            continue
        if not found[pid]["cmdline"] or (found[pid]["role"] or _role(pid)) in SKIP_ROLES:
            del found[pid]


def _role(pid: int) -> str:
    """DD_SLURM_ROLE of a process found by tree, session or cgroup (the supervisor and scans are not leftovers)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return ""
    return next((v[len(b"DD_SLURM_ROLE="):].decode(errors="replace") for v in environ
                 if v.startswith(b"DD_SLURM_ROLE=")), "")


def scan_command(args: list[str]) -> int:
    """`_scan ATTEMPT_ID [--dir ATTEMPT_DIR] [--record | --kill]`: one JSON line."""
    directory = args[args.index("--dir") + 1] if "--dir" in args[:-1] else ""
    answer = record_trees(directory) if "--record" in args else scan_node(args[0], "--kill" in args, directory)
    print(json.dumps(answer), flush=True)
    return 0
