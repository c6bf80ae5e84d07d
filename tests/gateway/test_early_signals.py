"""A stop signal that reaches the gateway during its start-up, started as the runtime starts it
(the boot, entry.py, `_gateway`), counts: the boot's first instruction records it, and the gateway
ends with exit 0 instead of waiting for a config nobody writes (or serving on)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.bundle.stage import ensure_bundle
from dd_slurm.scheduler.render import interpreter
from tests.gateway.backends import replica
from tests.runtime.test_signals_startup import caught

pytestmark = pytest.mark.timeout(60)


def _signalled_at_boot(tmp_path, awaits: bool) -> subprocess.Popen:
    """Start the gateway from a staged bundle and send SIGTERM the moment the boot's handler is in
    place (SigCgt): the gateway's own code (bundle check, imports) takes hundreds of ms after that."""
    digest, bundle = ensure_bundle(tmp_path / "ws")
    config = {"schema": 1, "listen": {"host": "127.0.0.1", "port": 0}, "aliases": {"m": {"replicas": [replica(1)]}},
              "state_path": str(tmp_path / "state.json"), "stats_path": str(tmp_path / "stats.json")}
    if not awaits:
        (tmp_path / "gateway.json").write_text(json.dumps(config))
    argv = [*interpreter(sys.executable, entry_sha256(), digest), str(bundle / "entry.py"), "_gateway",
            *(["--await-config"] if awaits else []), str(tmp_path / "gateway.json")]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env={})
    deadline = time.monotonic() + 10
    while not caught(proc.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.0002)
    proc.send_signal(signal.SIGTERM)
    return proc


@pytest.mark.parametrize("awaits, last_line", [(True, "stopped before its config was written"),
                                               (False, "stopped before serving")],
                         ids=["awaiting its config", "config given"])
def test_sigterm_during_start_up_ends_the_gateway_with_exit_0(tmp_path, awaits, last_line) -> None:
    """SIGTERM right after the boot's first instruction, before the gateway's handlers exist: it
    ends with exit 0 within seconds and says why, instead of waiting (or serving) until SIGKILL;
    it never listened, so it wrote no state file."""
    proc = _signalled_at_boot(tmp_path, awaits)
    try:
        code = proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    log = proc.stderr.read().rstrip().splitlines()
    proc.stderr.close()
    assert (0, last_line, False) == (code, log[-1].split(": ", 1)[-1] if log else "",
                                     (tmp_path / "state.json").exists())
