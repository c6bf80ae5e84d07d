"""Staging writes only into directories of the user staging that nobody else may write to: a
workspace, attempts/, bundles/ or published bundle that another user owns or that group or
others can write is refused (InvalidInput, exit 2, one line naming it); fresh ones are 0700."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dd_slurm.bundle.stage import stage
from dd_slurm.clock import FakeClock
from dd_slurm.errors import EXIT_INVALID, InvalidInput
from dd_slurm.plan.io import load_plan
from tests.conftest import PLANS, ROOT

OTHER_UID = 12345


def _stage(workspace: Path):
    return stage(load_plan(PLANS / "single-node.json"), workspace, FakeClock())


def _refusal(workspace: Path) -> InvalidInput:
    with pytest.raises(InvalidInput) as caught:
        _stage(workspace)
    return caught.value


def _loosen(path: Path) -> None:
    os.chmod(path, 0o777)


def _give_away(path: Path) -> None:
    os.chown(path, OTHER_UID, OTHER_UID)


@pytest.mark.parametrize("spoil", [_loosen, _give_away], ids=["mode-0777", "other-uid"])
@pytest.mark.parametrize("rel", ["", "attempts", "bundles", "runs"], ids=["workspace", "attempts", "bundles", "runs"])
def test_a_workspace_dir_others_can_write_is_refused(tmp_path, rel, spoil) -> None:
    """An existing workspace (or its attempts/, bundles/ or runs/) with mode 0777 or owned by another
    uid: staging stops before writing anything, with one line naming the dir and exit code 2."""
    ws = tmp_path / "ws"
    (ws / rel).mkdir(parents=True, mode=0o700)
    os.chmod(ws, 0o700)
    spoil(ws / rel)
    refused = _refusal(ws)
    assert (EXIT_INVALID, True, 1) == (refused.exit_code, str(ws / rel) in str(refused), len(str(refused).splitlines()))
    assert [] == list(ws.glob("attempts/*"))


@pytest.mark.parametrize("spoil", [_loosen, _give_away], ids=["mode-0777", "other-uid"])
@pytest.mark.parametrize("inner", ["", "lib/dd_slurm", "entry.py"], ids=["bundle", "lib-dir", "entry"])
def test_a_published_bundle_others_can_write_is_refused(tmp_path, inner, spoil) -> None:
    """The bundle of a first stage, then loosened or given away (itself, a dir in it or a file):
    the next stage refuses it, naming the path, instead of reusing it."""
    first = _stage(tmp_path / "ws")
    spoil(first.bundle_dir / inner)
    refused = _refusal(tmp_path / "ws")
    assert (EXIT_INVALID, True) == (refused.exit_code, str(first.bundle_dir / inner).rstrip("/") in str(refused))
    assert [first.attempt_dir.name] == [p.name for p in (tmp_path / "ws" / "attempts").iterdir()]


def test_a_symlinked_attempts_dir_is_refused(tmp_path) -> None:
    """attempts/ as a symlink (to a dir of this user, even) is not a workspace dir staging trusts."""
    ws = tmp_path / "ws"
    ws.mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", ws / "attempts")
    refused = _refusal(ws)
    assert (True, []) == (str(ws / "attempts") in str(refused), list((tmp_path / "elsewhere").iterdir()))


STAGE_UNDER_UMASK_0 = """
import json, os, sys
from dd_slurm.bundle.stage import stage
from dd_slurm.clock import FakeClock
from dd_slurm.plan.io import load_plan
os.umask(0)
staged = stage(load_plan(sys.argv[1]), sys.argv[2], FakeClock())
print(json.dumps(str(staged.attempt_dir)))
"""


@pytest.mark.timeout(60)
def test_fresh_workspace_dirs_are_private_whatever_the_umask(tmp_path) -> None:
    """A first stage under umask 0 (in a subprocess): the workspace, attempts/ and bundles/ it
    creates (runs/ too) are mode 0700, so nobody else can plant a bundle or an attempt in them."""
    ws = tmp_path / "ws"
    done = subprocess.run([sys.executable, "-c", STAGE_UNDER_UMASK_0, str(PLANS / "single-node.json"), str(ws)],
                          capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert 0 == done.returncode, done.stderr
    modes = {rel: stat.S_IMODE(os.lstat(ws / rel).st_mode) for rel in ("", "attempts", "bundles", "runs")}
    assert {"": 0o700, "attempts": 0o700, "bundles": 0o700, "runs": 0o700} == modes
    assert Path(json.loads(done.stdout)).parent == ws / "attempts"
