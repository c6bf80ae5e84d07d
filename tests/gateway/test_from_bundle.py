"""The gateway runs from the staged runtime bundle alone (standard library + bundled attrs)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from dd_slurm.bundle.manifest import entry_sha256
from dd_slurm.bundle.stage import ensure_bundle
from dd_slurm.scheduler.render import interpreter
from tests.gateway.backends import Backend, Client, answer, replica

pytestmark = pytest.mark.timeout(60)


def test_bundle_entry_runs_the_gateway_without_site_packages(tmp_path) -> None:
    """The gateway started as the runtime starts it (the boot checks entry.py, entry.py verifies the
    whole bundle; `-I -S -B`, no site-packages at all) publishes its port, forwards a request, and
    exits 0 on SIGTERM with its stats written."""
    digest, bundle = ensure_bundle(tmp_path / "ws")
    backend = Backend(answer())
    config = {"schema": 1, "listen": {"host": "127.0.0.1", "port": 0},
              "aliases": {"m": {"replicas": [replica(backend)]}},
              "state_path": str(tmp_path / "state.json"), "stats_path": str(tmp_path / "stats.json")}
    (tmp_path / "gateway.json").write_text(json.dumps(config))
    proc = subprocess.Popen([*interpreter(sys.executable, entry_sha256(), digest), str(bundle / "entry.py"),
                             "_gateway", str(tmp_path / "gateway.json")], stderr=subprocess.PIPE, text=True, env={})
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "state.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else "slow"
            time.sleep(0.02)
        client = Client(json.loads((tmp_path / "state.json").read_text())["port"])
        status = client.request("/m/v1/completions")[0]
        client.close()
    finally:
        proc.terminate()
        code = proc.wait(10)
        backend.close()
    assert (200, 0, 1) == (status, code, json.loads((tmp_path / "stats.json").read_text())["aliases"]["m"]["requests"])
