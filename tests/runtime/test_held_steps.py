"""A held step (a deployment launched while the preflight runs): the on-node launcher, started as
srun starts it, waits for "go" on its stdin before it looks at its program, writes its record or
starts anything; end of input instead ends it without starting anything."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.bundle.stage import ensure_bundle
from dd_slurm.runtime.node.stepexec import RELEASE
from dd_slurm.scheduler.render import interpreter
from tests.runtime.test_signals_startup import caught

pytestmark = pytest.mark.timeout(60)


def _held_launcher(tmp_path) -> tuple[subprocess.Popen, dict]:
    """The launcher of a held step whose program writes a marker file; the paths it would touch."""
    digest, bundle = ensure_bundle(tmp_path / "ws")
    paths = {"spec": tmp_path / "deploy-m-0.json", "record": tmp_path / "deploy-m-0.started.json",
             "marker": tmp_path / "server-ran"}
    spec = {"name": "deploy-m-0", "node": "n1", "argv": ["/usr/bin/touch", str(paths["marker"])], "values": {},
            "env": {"PATH": "/usr/bin:/bin"}, "pass": [], "gpu_slots": [], "deployment": "m", "replica": 0,
            "rank": 0, "choose_port": False, "avoid_ports": [], "held": True}
    paths["spec"].write_text(json.dumps(spec))
    proc = subprocess.Popen([*interpreter(sys.executable, entry_sha256(), digest), str(bundle / "entry.py"), "_step",
                             str(paths["spec"])], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env={})
    return proc, paths


def _touched(paths: dict) -> tuple[bool, bool]:
    return paths["record"].exists(), paths["marker"].exists()


def test_a_held_step_starts_its_program_only_once_released(tmp_path) -> None:
    """For 1 s the launcher waits: no record, no program. After "go": its record (with the release
    time) and the program's effect appear, and it exits 0 as the program did."""
    proc, paths = _held_launcher(tmp_path)
    time.sleep(1.0)
    before = (proc.poll(), *_touched(paths))
    release = time.time()
    proc.stdin.write(RELEASE)
    proc.stdin.close()
    code = proc.wait(20)
    proc.stderr.close()
    record = json.loads(paths["record"].read_text())
    assert ((None, False, False), 0, (True, True)) == (before, code, _touched(paths))
    assert release <= record["released_at"] < release + 10


def test_a_held_step_whose_input_ends_starts_nothing(tmp_path) -> None:
    """The supervisor gone (its end of the pipe closed) before release: the launcher exits 0 with
    one line saying so, without a record and without running its program."""
    proc, paths = _held_launcher(tmp_path)
    proc.stdin.close()
    code = proc.wait(20)
    log = proc.stderr.read().decode().strip().splitlines()
    proc.stderr.close()
    assert (0, (False, False)) == (code, _touched(paths))
    assert ["dd-slurm step deploy-m-0: never released (input ended); nothing was started"] == log


@pytest.mark.parametrize("moment", ["as the boot records it", "while it waits"])
def test_a_held_step_told_to_stop_dies_of_it_and_starts_nothing(tmp_path, moment) -> None:
    """SIGTERM while held (cleanup, or scancel of the step), whether it lands as the boot's handler
    records it (before the launcher's own code) or while the launcher waits for "go": it dies of
    it, as its program would have, without a record and without running its program, though its
    stdin is still open."""
    proc, paths = _held_launcher(tmp_path)
    if moment == "while it waits":
        time.sleep(1.0)  # past the bundle check and imports
    else:
        deadline = time.monotonic() + 10
        while not caught(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.0002)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(10)
    finally:
        proc.stdin.close()
        proc.stderr.close()
    assert (-signal.SIGTERM, (False, False)) == (code, _touched(paths))
