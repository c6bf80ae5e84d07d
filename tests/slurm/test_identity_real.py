"""Only our servers count, and only our client gets in, on the real cluster: concurrent attempts
on one port, foreign listeners, automatic ports, the attempt key, forwarded secrets off disk, and
how srun's --export=NAMES behaves."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.runtime.harness import evidence, no_leftovers, outcome, plan_data, read
from tests.runtime.test_identity_fake import auth_client
from tests.slurm.conftest import wait_until, write_script
from tests.slurm.real_attempt import EXE, submit, wait_job_gone, wait_state


def addresses(cluster) -> tuple[str, ...]:
    """n1-n3 of this cluster: a single-node job may land on any."""
    return tuple(cluster.addr(n) for n in ("n1", "n2", "n3"))
FAKE_MODEL = ROOT / "dd_slurm" / "testing" / "fake_model.py"


def run_to_done(tmp_path: Path, data: dict, name: str, env: dict | None = None) -> Path:
    attempt_dir, job_id = submit(tmp_path, data, name, env)
    wait_state(attempt_dir, ("done",), 150)
    wait_job_gone(job_id)
    return attempt_dir


def tagged_replies(data: dict) -> dict:
    """The server's model name is its own attempt dir, so every reply says whose server it was."""
    argv = data["deployments"][0]["argv"]
    argv[argv.index("--model") + 1] = "{attempt_dir}"
    return data


def replies_are_own(attempt_dir: Path) -> bool:
    lines = (attempt_dir / "results" / "records.jsonl").read_text().splitlines()
    return bool(lines) and all(json.loads(line)["text"].startswith(f"[{attempt_dir}] reply") for line in lines)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("port", ["fixed", "null"])
def test_the_same_plan_three_times_at_once(tmp_path, cluster, port: str) -> None:
    """Three attempts of one plan submitted together. With a fixed port they may meet on one node:
    each ends done with a reason, none succeeds with a reply from another's server, nothing is left.
    With automatic ports all three succeed, each answered by its own server."""
    data = tagged_replies(plan_data("single-node"))
    if port == "null":
        data["deployments"][0]["port"] = None
    with ThreadPoolExecutor(3) as pool:
        dirs = list(pool.map(lambda k: run_to_done(tmp_path, data, f"same-{port}-{k}"), range(3)))
    ends = [outcome(d) for d in dirs]
    assert all(o is not None and r for o, r in ends), ends
    for directory, (result, _reason) in zip(dirs, ends):
        assert result != "succeeded" or replies_are_own(directory), directory
        assert [] == no_leftovers(directory.name)
    if port == "null":
        assert [("succeeded", "ok")] * 3 == ends, "\n".join(evidence(d) for d in dirs if outcome(d)[0] != "succeeded")


def _foreign_http_servers(port: int, cluster) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", a],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for a in addresses(cluster)]
    wait_until(lambda: all(_listening(a, port) for a in addresses(cluster)), 20, "the foreign servers")
    return procs


def _listening(address: str, port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex((address, port)) == 0


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.timeout(240)
def test_a_foreign_http_server_already_on_the_port(tmp_path, cluster) -> None:
    """`python3 -m http.server` listens on the deployment's port on every node before the job:
    port_busy before any server starts, and the foreign processes still run afterwards."""
    data = plan_data("single-node")
    foreign = _foreign_http_servers(data["deployments"][0]["port"], cluster)
    try:
        attempt_dir = run_to_done(tmp_path, data, "foreign-http")
        assert ("failed", "port_busy") == outcome(attempt_dir)
        assert [None, None, None] == [p.poll() for p in foreign]
    finally:
        _stop(foreign)


@pytest.mark.timeout(240)
def test_a_foreign_server_that_starts_while_ours_loads(tmp_path, cluster) -> None:
    """A healthy foreign model server appears on the port (every node) once the attempt is
    deploying, before its own slow server binds: server_identity naming port and node, never
    succeeded; the foreign servers are never signalled."""
    data = plan_data("single-node")
    argv = data["deployments"][0]["argv"]
    argv[argv.index("--load-time") + 1] = "8"
    port = data["deployments"][0]["port"]
    attempt_dir, job_id = submit(tmp_path, data, "foreign-late")
    wait_state(attempt_dir, ("deploying", "done"), 120)
    foreign = [subprocess.Popen([sys.executable, str(FAKE_MODEL), "--host", a, "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for a in addresses(cluster)]
    try:
        wait_state(attempt_dir, ("done",), 120)
        wait_job_gone(job_id)
        detail = [json.loads(line) for line in (attempt_dir / "journal.jsonl").read_text().splitlines()][-1]["detail"]
        assert ("failed", "server_identity") == outcome(attempt_dir)
        assert detail.startswith(f"small-0: port {port} on n") and "not to the step's processes" in detail, detail
        assert [None, None, None] == [p.poll() for p in foreign]
        assert [] == no_leftovers(attempt_dir.name)
    finally:
        _stop(foreign)


@pytest.mark.timeout(240)
def test_forwarded_secret_and_key_reach_the_client_and_no_file(tmp_path, cluster) -> None:
    """HF_TOKEN=<marker> forwarded from the submitting environment: the attempt succeeds, the
    client saw the marker and the attempt key (digests), servers answered 401 without the key,
    and the marker is in no file of the workspace (attempt dir included) nor in inspect."""
    marker = f"hf-marker-{uuid.uuid4().hex}"
    data = auth_client(plan_data("replicas"))
    attempt_dir = run_to_done(tmp_path, data, "secret", env={**cluster.env(), "HF_TOKEN": marker})
    auth = read(attempt_dir, "results/auth.json")
    assert (("succeeded", "ok"), 401, 401, 200) == (outcome(attempt_dir), auth["without"], auth["wrong"], auth["mine"])
    assert hashlib.sha256(marker.encode()).hexdigest() == auth["hf"]
    found = subprocess.run(["grep", "-r", "-l", marker, str(tmp_path / "ws")], capture_output=True, text=True)
    assert (1, "") == (found.returncode, found.stdout)
    inspect = subprocess.run(EXE + ["inspect", "--json", str(attempt_dir)], capture_output=True, text=True, timeout=60)
    assert marker not in inspect.stdout
    assert [] == no_leftovers(attempt_dir.name)


def _env_through_srun(tmp_path: Path, job_prefix: str, which: str, cluster) -> dict:
    """A task's environment under `srun --export=A,B,MISSING` with A, B and C set for srun."""
    out = tmp_path / f"env-{which}.json"
    python = sys.executable if which == "fake" else "/usr/bin/python3"
    dump = [python, "-c", f"import json, os; json.dump(dict(os.environ), open({str(out)!r}, 'w'))"]
    exports = {"A": "alpha", "B": "b,with,commas", "C": "not-listed"}
    if which == "fake":
        from dd_slurm.testing.fake_slurm import install

        srun = install(tmp_path / "fake-bin").bin_dir / "srun"
        subprocess.run([str(srun), "--jobid=1", "--nodes=1", "--ntasks=1", "--nodelist=n1", "--overlap",
                        "--export=A,B,MISSING", *dump], check=True, env={"PATH": "/usr/bin:/bin", **exports},
                       timeout=60)
    else:
        body = " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items()) + " srun --overlap --nodes=1 " \
            "--ntasks=1 --export=A,B,MISSING " + " ".join(shlex.quote(w) for w in dump)
        script = write_script(tmp_path, "export", body, f"--job-name={job_prefix}export", "--time=00:02:00",
                              f"--output={tmp_path}/out.txt", "--export=NONE")
        subprocess.run([cluster.tool("sbatch"), "--wait", str(script)], check=True, capture_output=True, timeout=110,
                       env=cluster.env())
    return json.loads(out.read_text())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("which", ["real", "fake"])
def test_srun_export_names_passes_exactly_those(tmp_path, job_prefix, which, cluster) -> None:
    """Slurm's own behaviour the runtime relies on, and the fake srun alike: `srun --export=A,B`
    gives the task A and B with the values from srun's environment (commas included; a name srun
    does not have is simply absent), Slurm's SLURM_* variables, and nothing else of the caller's."""
    env = _env_through_srun(tmp_path, job_prefix, which, cluster)
    assert ("alpha", "b,with,commas") == (env["A"], env["B"])
    assert "SLURM_JOB_ID" in env
    assert set() == {k for k in env if not k.startswith("SLURM")} - {"A", "B", "TMPDIR", "LC_CTYPE"}
