"""On-node commands import nothing of the bundle that was not verified: lib/ is not on sys.path,
and only the modules of entry.NODE_MODULES load from it, each from bytes checked against the
verified manifest. A file planted in lib/ under a standard-library name never runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dd_slurm.bundle.entry import NODE_MODULES, OnlyVerified, module_files
from tests.runtime.harness import plan_data, stage_plan

PAYLOAD = "open({marker!r}, \"w\").write(\"ran\")  # builtins only: runs whatever imported it\n"


def _plant(bundle: Path, rel: str, text: str) -> Path:
    """A file the manifest does not list, written into the read-only bundle."""
    target = bundle / rel
    os.chmod(target.parent, 0o755)
    target.write_text(text)
    os.chmod(target.parent, 0o555)
    return target


def _node_argv(staged, command: str, *args: str) -> list[str]:
    """The way a step runs an on-node command: the rendered boot, entry.py, the command."""
    from dd_slurm.bundle.manifest import entry_sha256
    from dd_slurm.scheduler.render import interpreter

    return [*interpreter(sys.executable, entry_sha256(), staged.bundle_digest), str(staged.bundle_dir / "entry.py"),
            command, *args]


@pytest.mark.timeout(60)
def test_a_planted_stdlib_name_in_lib_never_runs(tmp_path) -> None:
    """`_identity` imports ipaddress (listeners.py): a planted, unlisted lib/ipaddress.py is not
    what it gets, so the marker is never written and the command answers as usual."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    marker = tmp_path / "marker"
    _plant(staged.bundle_dir, "lib/ipaddress.py", PAYLOAD.format(marker=str(marker)))
    request = tmp_path / "identity.json"
    request.write_text(json.dumps({"nodes": {}}))
    done = subprocess.run(_node_argv(staged, "_identity", str(request)), capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURMD_NODENAME": "n1"})
    assert (False, 0) == (marker.exists(), done.returncode), done.stderr
    assert {"node": "n1", "checks": {}} == json.loads(done.stdout)


@pytest.mark.timeout(60)
def test_a_node_command_has_no_bundle_path_on_sys_path(tmp_path) -> None:
    """No path of the bundle is searched for imports: a planted lib/<name>.py for any name the
    command might import is unreachable (checked through a `_scan`, whose answer is still one line)."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    marker = tmp_path / "marker"
    for name in ("fnmatch", "ctypes", "socket", "selectors", "urllib", "signal", "enum"):
        _plant(staged.bundle_dir, f"lib/{name}.py", PAYLOAD.format(marker=str(marker)))
    done = subprocess.run(_node_argv(staged, "_scan", staged.attempt_id, "--dir", str(staged.attempt_dir)),
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SLURMD_NODENAME": "n1"})
    assert (False, 0) == (marker.exists(), done.returncode), done.stderr
    assert 1 == len(done.stdout.splitlines())


def _bundle_files(bundle: Path) -> dict[str, str]:
    return json.loads((bundle / "manifest.json").read_text())["files"]


def test_a_module_changed_after_verification_does_not_load(tmp_path) -> None:
    """The import hook checks the bytes it loads against the manifest, not only what was verified
    before: a module swapped in between is an ImportError, its code never executed."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    finder = OnlyVerified(str(staged.bundle_dir), NODE_MODULES, _bundle_files(staged.bundle_dir))
    marker = tmp_path / "marker"
    for rel in module_files(("dd_slurm.plan.fields",)):
        target = staged.bundle_dir / rel
        os.chmod(target, 0o644)
        target.write_bytes(target.read_bytes()[:16] + b"x" if rel.endswith(".pyc") else
                           PAYLOAD.format(marker=str(marker)).encode())
    spec = finder.find_spec("dd_slurm.plan.fields")
    module = type(sys)("dd_slurm.plan.fields")
    with pytest.raises(ImportError) as caught:
        spec.loader.exec_module(module)
    assert (False, True) == (marker.exists(), "checksum" in str(caught.value))


def test_only_listed_modules_are_served(tmp_path) -> None:
    """A dd_slurm module outside NODE_MODULES is refused even though the bundle lists it; names
    outside dd_slurm are left to the standard library's finders (None)."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    finder = OnlyVerified(str(staged.bundle_dir), NODE_MODULES, _bundle_files(staged.bundle_dir))
    with pytest.raises(ImportError):
        finder.find_spec("dd_slurm.cli")
    assert (None, True) == (finder.find_spec("ipaddress"), finder.find_spec("dd_slurm.runtime").submodule_search_locations
                            == [str(staged.bundle_dir / "lib" / "dd_slurm" / "runtime")])


def test_a_listed_module_loads_its_verified_bytecode(tmp_path) -> None:
    """The hook runs the manifest-listed .pyc of this interpreter (its sha256 checked; the source is
    not read, so a broken source changes nothing), and the module names its source as __file__."""
    staged = stage_plan(tmp_path, plan_data("single-node"))
    finder = OnlyVerified(str(staged.bundle_dir), NODE_MODULES, _bundle_files(staged.bundle_dir))
    source = staged.bundle_dir / "lib" / "dd_slurm" / "plan" / "fields.py"
    os.chmod(source, 0o644)
    source.write_text("raise SystemExit('the source ran')\n")
    spec = finder.find_spec("dd_slurm.plan.fields")
    module = type(sys)("dd_slurm.plan.fields")
    spec.loader.exec_module(module)
    assert (str(source), str(source), True) == (spec.origin, module.expand.__code__.co_filename, callable(module.expand))
