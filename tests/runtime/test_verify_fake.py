"""Verification before launch (issue 5): each wrong input fails the attempt with its reason code
before any model server process exists, and the journal shows the failing check."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.runtime.harness import failure_path, journal, plan_data, run, servers_started, three_single_node_deployments


def _tamper_bundle(staged) -> None:
    target = Path(staged.bundle_dir) / "lib" / "dd_slurm" / "plan" / "records.py"
    os.chmod(target, 0o644)
    target.write_text(target.read_text() + "\n# tampered\n")


def _plant_bytecode(staged) -> None:
    cache = Path(staged.bundle_dir) / "lib" / "dd_slurm" / "__pycache__"
    os.chmod(cache.parent, 0o755)
    cache.mkdir(exist_ok=True)
    (cache / "plan.cpython-311.pyc").write_bytes(b"planted")


def _tamper_plan(staged) -> None:
    path = staged.attempt_dir / "plan.json"
    os.chmod(path, 0o600)
    path.write_bytes(path.read_bytes().replace(b'"cleanup_grace_s":2', b'"cleanup_grace_s":3'))


def _foreign_results_dir(staged) -> None:
    os.chown(staged.attempt_dir / "results", 65534, 65534)


def _missing_executable(data: dict) -> dict:
    data["deployments"][0]["argv"][0] = "/opt/no/such/vllm"
    return data


def _missing_preflight_program(data: dict) -> dict:
    data["client"]["preflight_argv"] = ["/opt/no/such/dd-client", "--preflight"]
    return data


CASES = {
    "tampered bundle file": (lambda d: d, {"before_run": _tamper_bundle}, "bundle_checksum"),
    "tampered plan": (lambda d: d, {"before_run": _tamper_plan}, "plan_digest"),
    "bytecode planted in the bundle": (lambda d: d, {"before_run": _plant_bytecode}, "bundle_checksum"),
    "8 GPUs per node on 4-GPU nodes": (lambda d: {**d, "job": {**d["job"], "gpus_per_node": 8}}, {"gpus": 4},
                                       "gpu_shape"),
    "fewer nodes than planned": (lambda d: d, {"nodes": ("127.0.2.1",)}, "gpu_shape"),
    "results dir owned by someone else": (lambda d: d, {"before_run": _foreign_results_dir}, "paths"),
    "executable missing on its node": (_missing_executable, {}, "executable_missing"),
    "client preflight program missing": (_missing_preflight_program, {}, "executable_missing"),
    "unresolvable node": (lambda d: d, {"nodes": ("no-such-node.invalid",)}, "hosts"),
}


# What the node probe finds fails the attempt from preflight, where the probe runs beside the client's preflight.
PROBED = {"executable missing on its node", "client preflight program missing"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_verification_before_any_server(tmp_path, fake_slurm, case: str) -> None:
    """The attempt ends failed with the check's reason, from staged (local checks) or from
    preflight (the node probe) to cleanup; no deployment step was ever started."""
    mutate, kwargs, reason = CASES[case]
    attempt, staged = run(tmp_path, fake_slurm, mutate(plan_data("two-deployments" if "nodes" in case else "single-node")),
                          **kwargs)
    assert ("failed", reason) == (attempt.outcome, attempt.reason)
    assert failure_path(reason, case in PROBED) == journal(staged.attempt_dir)
    assert [] == servers_started(staged.attempt_dir)


def test_busy_port_on_the_second_node(tmp_path, fake_slurm) -> None:
    """A port in use on the node of the second deployment (n2 here) fails `port_busy`, checked on
    that node, before anything starts."""
    data = three_single_node_deployments(plan_data("single-node"))
    second = data["deployments"][1]
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.2.2", second["port"]))
        busy.listen()
        attempt, staged = run(tmp_path, fake_slurm, data)
    assert ("failed", "port_busy") == (attempt.outcome, attempt.reason)
    detail = [l for l in (staged.attempt_dir / "journal.jsonl").read_text().splitlines() if "port_busy" in l][0]
    assert f"port {second['port']} is already in use on 127.0.2.2" in detail
    assert [] == servers_started(staged.attempt_dir)
