"""What runs on a compute node inside a step: the program launcher, the pre-launch probe, the
listener identity check, and the leftover scan (leftover_scan.py). Standard library only; each
prints or writes JSON and never raises a traceback."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping

from dd_slurm.runtime.node.procfs import node_name, start_time
from dd_slurm.store import attempt_files as files  # standard library only, like this module
from dd_slurm.store.atomic import write_json_atomic

# Every step of an allocation imports this module before its program starts, so it imports little:
# no pathlib or shutil, and socket only where a socket is made (`_socket` resolves names).

EXIT_NOT_FOUND = 127
EXIT_GPU_SHAPE = 86


def read_json(path: str) -> dict:
    with open(path, "rb") as handle:
        return json.loads(handle.read())


def which(program: str, path: str | None) -> str | None:
    """shutil.which(program, path=path) on POSIX, without importing shutil: a name with a
    directory part is checked as it is; else the first executable non-directory on `path`
    (None: this process's PATH; empty: nowhere)."""
    def runnable(candidate: str) -> bool:
        return os.access(candidate, os.F_OK | os.X_OK) and not os.path.isdir(candidate)

    if os.path.dirname(program):
        return program if runnable(program) else None
    if path is None:
        path = os.environ.get("PATH", os.defpath)
    seen: set[str] = set()
    for directory in path.split(os.pathsep) if path else ():
        if directory not in seen:
            seen.add(directory)
            if runnable(os.path.join(directory, program)):
                return os.path.join(directory, program)
    return None


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): descendants orphaned by a double fork are re-parented to
    this process (and, after execve, to the program) instead of init, so the leftover scan finds
    them in the step's process tree. False where the kernel or libc does not offer it."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def step_environment(spec: dict, slurm_env: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """The spec's environment, the values of its `pass` names from this step's own environment
    (srun carried them; the spec file has names only), this step's SLURM_* variables, its GPU slots."""
    env = dict(spec["env"])
    env.update({n: slurm_env[n] for n in spec.get("pass") or () if n in slurm_env})
    env.update({k: v for k, v in slurm_env.items() if k.startswith(("SLURM_", "SLURMD_"))})
    visible = [d for d in slurm_env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    slots = spec.get("gpu_slots") or []
    if slots and max(slots) >= len(visible):
        return env, f"needs GPU slots {slots} but the step sees CUDA_VISIBLE_DEVICES={visible}"
    if slots:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[s] for s in slots)
    return env, None


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
MIN_AUTOMATIC_PORTS = 1000


def automatic_ports(ephemeral: tuple[int, int]) -> range:
    """Where an automatic port is looked for: above the kernel's ephemeral range (61000-65535 with
    Linux's default 32768-60999), else below it (from 10000). A port in that range, free when looked
    at, can be handed to any bind(0) or outgoing connection (srun and slurmstepd listen on such
    ports, a vLLM server opens several while it loads) before the server binds it, which then fails
    with "Address already in use". An empty range: no room outside it (the kernel's choice, bind(0))."""
    low, high = ephemeral
    above, below = range(max(high + 1, 1024), 65536), range(10000, max(low, 10000))
    return next((r for r in (above, below) if len(r) >= MIN_AUTOMATIC_PORTS), range(0))


def ephemeral_range(path: str = EPHEMERAL_RANGE) -> tuple[int, int]:
    try:
        with open(path) as handle:
            low, high = (int(v) for v in handle.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def choose_port(address: str, avoid: list[int], tries: int = 64, ports: range | None = None,
                claims: str | None = None) -> int | None:
    """A port free on this node's address now, not one of `avoid`, and claimed for this process and
    the program it execs (port_claims: not one another launcher chose a moment ago): outside the
    ephemeral range (automatic_ports), tried from a random place in it; the kernel's choice when
    there is no room."""
    import errno
    import socket

    from dd_slurm.runtime.node.port_claims import CLAIMS_DIR, claim  # standard library only

    ports = automatic_ports(ephemeral_range()) if ports is None else ports
    start = int.from_bytes(os.urandom(4), "big")
    for attempt in range(tries):
        wanted = ports[(start + attempt) % len(ports)] if len(ports) else 0
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address, wanted))
            except OSError as err:
                if wanted == 0 or err.errno == errno.EADDRNOTAVAIL:
                    return None  # not an address of this node
                continue
            port = sock.getsockname()[1]
        if port >= 1024 and port not in avoid and claim(port, claims or CLAIMS_DIR):
            return port
    return None


def launch_plan(spec: dict, env: dict[str, str], node: str,
                address: str) -> tuple[str, list[str], dict, tuple[str, str] | None]:
    """The program found on the step's own PATH, the expanded argv, what to record about it (the
    port), and (reason, problem) if it cannot run."""
    from dd_slurm.plan.fields import expand  # standard library only

    values = dict(spec.get("values") or {})
    if spec.get("choose_port"):
        port = choose_port(address, list(spec.get("avoid_ports") or []))
        if port is None:
            return "", [], {"port": None}, ("port_busy", f"no free port on {node}")
        values["port"] = str(port)
    argv = [expand(a, values) for a in spec["argv"]]
    noted = {"port": int(values["port"])} if spec.get("rank") == 0 and "port" in values else {}
    program = which(argv[0], env.get("PATH")) if argv else None
    missing = ("executable_missing", f"executable {argv[:1]} not found on {node}")
    return program or "", argv, noted, None if program else missing


RELEASE = b"go\n"


def heed_stop_signals(recorded: list[int] | None) -> None:
    """From here on SIGTERM, SIGINT and SIGHUP end this launcher as they would end its program (the
    boot's handlers only recorded them), and one the boot recorded already ends it now: a step told
    to stop before its program started never starts it, held or not."""
    import _signal  # the C module: `signal` would import enum

    stops = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
    for signo in stops:
        _signal.signal(signo, _signal.SIG_DFL)
    for signo in recorded or ():
        if signo in stops:
            os.kill(os.getpid(), signo)


def await_release(name: str) -> float | None:
    """A held step waits here, before it looks at its program, for RELEASE on its stdin (srun
    forwards the supervisor's pipe to the task); then stdin becomes /dev/null. The wall time of the
    release, or None when input ended first (the supervisor withdrew it, or is gone)."""
    got = b""
    while len(got) < len(RELEASE):
        chunk = os.read(0, len(RELEASE) - len(got))
        if not chunk:
            break
        got += chunk
    if got != RELEASE:
        print(f"dd-slurm step {name}: never released (input ended); nothing was started", file=sys.stderr, flush=True)
        return None
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    import time

    return time.time()


def run_step(spec_path: str, recorded: list[int] | None = None) -> int:
    """`recorded`: the stop signals the boot has recorded so far (see heed_stop_signals)."""
    heed_stop_signals(recorded)
    spec = read_json(spec_path)
    released_at = None
    if spec.get("held"):
        released_at = await_release(spec["name"])
        if released_at is None:
            return 0
    env, gpu_problem = step_environment(spec, dict(os.environ))
    record = {"name": spec["name"], "node": node_name(), "pid": os.getpid(), "start_time": start_time(os.getpid()),
              "pgid": os.getpgid(0), "sid": os.getsid(0),
              "job_id": os.environ.get("SLURM_JOB_ID"), "step_id": os.environ.get("SLURM_STEP_ID"),
              "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
              **({"released_at": released_at} if released_at is not None else {})}
    program, argv, noted, problem = launch_plan(spec, env, record["node"], node_address())
    kind, error = ("gpu_shape", gpu_problem) if gpu_problem else problem or (None, None)
    record.update(noted, error=error, error_kind=kind)
    write_json_atomic(files.started_of(spec_path), record, durable=False)  # read while the step runs
    if record["error"]:
        print(f"dd-slurm step {spec['name']}: {record['error']}", file=sys.stderr, flush=True)
        return EXIT_GPU_SHAPE if gpu_problem else EXIT_NOT_FOUND
    become_subreaper()  # kept across execve: the program's orphaned descendants stay in its tree
    os.execve(program, argv, env)
    return EXIT_NOT_FOUND  # not reached


def node_address(name: str | None = None) -> str:
    """The address this node's name (or `name`) resolves to (where a server given `--host {host}` listens)."""
    try:
        import _socket

        return _socket.gethostbyname(name or node_name())
    except OSError:
        return "0.0.0.0"


def port_free(port: int, address: str) -> bool:
    """Binding fails if anything listens on this address or on the wildcard address. SO_REUSEADDR
    as servers set it: connections of an earlier server lingering in TIME_WAIT do not count."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def probe(request_path: str) -> int:
    """The probe step's answer for the node it runs on, one JSON line."""
    print(json.dumps(probe_answer(read_json(request_path), node_name(), os.environ)), flush=True)
    return 0


def probe_answer(request: dict, node: str, environ: Mapping[str, str]) -> dict:
    """Checks for `node` from the request, in an environment holding the job's GPUs on it (a probe
    step's, or the batch step's): ports free, executables present (each the expanded argv[0] looked
    up on its step's own PATH; null: this environment's PATH, which srun carries from the supervisor
    as the steps' forwarded PATH), GPUs visible."""
    mine = request["nodes"].get(node, {})
    visible = [d for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
    address = node_address(node)
    own_path = environ.get("PATH", "")
    missing = [e["program"] for e in mine.get("executables", [])
               if not which(e["program"], own_path if e.get("path") is None else e["path"])]
    return {"node": node, "busy_ports": [p for p in mine.get("ports", []) if not port_free(p, address)],
            "missing_executables": missing, "visible_gpus": len(visible) if visible != ["NoDevFiles"] else 0,
            "slurm_gpus": environ.get("SLURM_GPUS_ON_NODE"), "missing_images": missing_images(mine.get("images", [])),
            "weights": weights_problems(mine.get("weights", []))}


def weights_problems(copies: list[dict]) -> list[dict]:
    """Each weights source readable, and room for each copy to stage (unless a good one is there)."""
    from dd_slurm.runtime.node.weights import WeightsProblem, check, source_manifest  # standard library only

    problems = []
    for copy in copies:
        if copy.get("target"):
            problems += check(copy["source"], copy["target"])
            continue
        try:
            source_manifest(copy["source"])
        except WeightsProblem as err:
            problems.append({"reason": err.reason, "detail": err.detail})
    return problems


def missing_images(images: list[str]) -> list[str]:
    """Image files (absolute paths) that are not a readable regular file here, with why; a registry
    reference is pyxis's to pull."""
    missing = []
    for image in dict.fromkeys(i for i in images if i.startswith("/")):
        try:
            fd = os.open(image, os.O_RDONLY | os.O_NONBLOCK)  # readable by this user; a FIFO does not block
        except OSError as err:
            missing.append(f"{image}: {err.strerror}")
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                missing.append(f"{image} is not a regular file")
        finally:
            os.close(fd)
    return missing


def identity(request_path: str) -> int:
    """Whether each listener the request names for this node (by replica: port, pid, start time,
    process group) belongs to its step's process tree, on every address the node's name resolves
    to here or where the supervisor connects from (the request's); one answer line for the node."""
    from dd_slurm.runtime.node.listeners import check_listeners, node_addresses  # standard library only

    request = read_json(request_path)
    node = node_name()
    addresses = dict.fromkeys(node_addresses(node) + list(request.get("addresses", {}).get(node, [])))
    checks = check_listeners(request["nodes"].get(node, {}), list(addresses))
    print(json.dumps({"node": node, "checks": checks}), flush=True)
    return 0


def main(argv: list[str], recorded: list[int] | None = None) -> int:
    command, rest = argv[0], argv[1:]
    if command == "_step":
        return run_step(rest[0], recorded)
    if command == "_probe":
        return probe(rest[0])
    if command == "_identity":
        return identity(rest[0])
    if command == "_stage":
        from dd_slurm.runtime.node.weights import stage_command  # standard library only

        return stage_command(rest[0], node_name())
    if command == "_scan":
        from dd_slurm.runtime.node.leftover_scan import scan_command

        return scan_command(rest)
    print(f"unknown node command {command}", file=sys.stderr)
    return 2
