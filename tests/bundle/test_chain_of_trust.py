"""No unverified code runs: the rendered boot checks entry.py's sha256, and entry.py (standard
library only) checks the manifest against the rendered digest and every file against the manifest
before anything of the bundle is imported. Each tampering below carries a payload that would write
a marker file the moment it ran: the marker never exists."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from dd_slurm.bundle.entry import manifest_digest
from tests.runtime.harness import allocation_env, journal, plan_data, stage_plan, supervisor_argv

PAYLOAD = "import pathlib; pathlib.Path({marker!r}).write_text('ran')\n"


def _writable(path: Path) -> None:
    for part in [path, *path.parents]:
        if part.name and part.exists():
            os.chmod(part, 0o755 if part.is_dir() else 0o644)
        if part.name == "bundles":
            break


def _prepend(path: Path, text: str) -> None:
    _writable(path)
    path.write_text(text + path.read_text())


def tamper_module(bundle: Path, marker: str) -> None:
    """manifest.py replaced by one that would run the payload and report no problems."""
    target = bundle / "lib" / "dd_slurm" / "bundle" / "manifest.py"
    _prepend(target, PAYLOAD.format(marker=marker))
    _writable(target)
    target.write_text(target.read_text() + "\ndef verify_bundle(*_a, **_k):\n    return []\n")


def tamper_module_and_manifest(bundle: Path, marker: str) -> None:
    """The same, with manifest.json rewritten to match (its digest is then not the rendered one)."""
    tamper_module(bundle, marker)
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for rel in list(manifest["files"]):
        manifest["files"][rel] = hashlib.sha256((bundle / rel).read_bytes()).hexdigest()
    manifest["digest"] = manifest_digest(manifest)
    _writable(manifest_path)
    manifest_path.write_text(json.dumps(manifest))


def tamper_bytecode(bundle: Path, marker: str) -> None:
    """cli's checked-hash .pyc swapped for one compiled from the payload (same source hash kept)."""
    pyc = next((bundle / "lib" / "dd_slurm" / "__pycache__").glob("cli.*.pyc"))
    header = pyc.read_bytes()[:16]
    import marshal

    _writable(pyc)
    pyc.write_bytes(header + marshal.dumps(compile(PAYLOAD.format(marker=marker), "cli.py", "exec")))


def tamper_entry(bundle: Path, marker: str) -> None:
    """entry.py itself runs the payload first."""
    _prepend(bundle / "entry.py", PAYLOAD.format(marker=marker))


TAMPERINGS = [
    (tamper_module, "lib/dd_slurm/bundle/manifest.py: checksum mismatch", True),
    (tamper_module_and_manifest, "is not the expected", True),
    (tamper_bytecode, "checksum mismatch", True),
    (tamper_entry, "sha256 is not", False),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tamper, message, journaled", TAMPERINGS, ids=lambda t: getattr(t, "__name__", None))
def test_tampered_bundle_never_runs(tmp_path, fake_slurm, tamper, message, journaled) -> None:
    """The attempt's own exec line, run with its allocation: the marker is never written, the
    error names the problem, and (when entry.py itself is intact) the attempt ends
    failed/bundle_checksum without anything started."""
    data = plan_data("single-node")
    staged = stage_plan(tmp_path, data)
    marker = tmp_path / "marker"
    tamper(staged.bundle_dir, str(marker))
    env = allocation_env(fake_slurm.bin_dir, ("127.0.2.1",), 1)
    done = subprocess.run(supervisor_argv(staged, data), env=env, capture_output=True, text=True, timeout=50)
    assert (False, True) == (marker.exists(), message in done.stderr), done.stderr
    assert 0 != done.returncode
    expected = [("staged", "cleanup", "bundle_checksum"), ("cleanup", "done", "bundle_checksum")] if journaled else []
    assert expected == (journal(staged.attempt_dir) if (staged.attempt_dir / "journal.jsonl").exists() else [])
    assert not (staged.attempt_dir / "steps").exists()


@pytest.mark.timeout(60)
def test_a_step_refuses_a_tampered_bundle(tmp_path) -> None:
    """On-node commands go through the same boot and entry.py: a changed on-node module makes the
    step exit before importing it."""
    from dd_slurm.bundle.manifest import entry_sha256
    from dd_slurm.scheduler.render import interpreter

    staged = stage_plan(tmp_path, plan_data("single-node"))
    marker = tmp_path / "marker"
    _prepend(staged.bundle_dir / "lib" / "dd_slurm" / "runtime" / "node" / "leftover_scan.py", PAYLOAD.format(marker=str(marker)))
    argv = [*interpreter("/usr/bin/python3", entry_sha256(), staged.bundle_digest), str(staged.bundle_dir / "entry.py"),
            "_scan", staged.attempt_id]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert (4, False) == (done.returncode, marker.exists())
    assert "leftover_scan.py: checksum mismatch" in done.stderr


def test_bytecode_ships_in_the_manifest_and_is_checked_hash(tmp_path) -> None:
    """Every module of lib/ has a checked-hash .pyc beside it, listed in the manifest."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    files = json.loads((staged.bundle_dir / "manifest.json").read_text())["files"]
    sources = [r for r in files if r.startswith("lib/") and r.endswith(".py")]
    compiled = {r for r in files if r.endswith(".pyc")}
    from importlib.util import cache_from_source

    missing = [r for r in sources if os.path.relpath(cache_from_source(r)) not in compiled]
    flags = {int.from_bytes((staged.bundle_dir / r).read_bytes()[4:8], "little") for r in compiled}
    assert ([], {0b11}) == (missing, flags)  # bit 0: hash-based, bit 1: checked
