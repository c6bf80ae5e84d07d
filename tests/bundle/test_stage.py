"""Staging: one content-addressed bundle per digest, verified on reuse; attempt dirs whole or absent."""

from __future__ import annotations

import json
import os
import stat

import pytest

from dd_slurm.bundle.manifest import verify_bundle
from dd_slurm.bundle.stage import stage
from dd_slurm.clock import FakeClock
from dd_slurm.errors import InvalidInput
from dd_slurm.plan.io import load_plan
from tests.conftest import PLANS


def test_staging_twice_reuses_the_bundle_and_makes_two_attempts(tmp_path) -> None:
    """The second stage verifies the existing bundle instead of copying it; each stage makes its
    own attempt dir (mode 0700) with the canonical plan, the record and the entrypoint."""
    plan = load_plan(PLANS / "single-node.json")
    first = stage(plan, tmp_path / "ws", FakeClock())
    marker = os.stat(first.bundle_dir / "manifest.json").st_mtime_ns
    second = stage(plan, tmp_path / "ws", FakeClock())
    assert (first.bundle_dir, marker) == (second.bundle_dir, os.stat(second.bundle_dir / "manifest.json").st_mtime_ns)
    assert [first.bundle_dir.name] == [p.name for p in (tmp_path / "ws" / "bundles").iterdir()]
    assert first.attempt_dir != second.attempt_dir
    assert 0o700 == stat.S_IMODE(os.stat(first.attempt_dir).st_mode)
    names = sorted(p.name for p in first.attempt_dir.iterdir())
    assert ["attempt.json", "bundle", "job.sbatch", "logs", "plan.json", "results"] == names
    assert [] == verify_bundle(first.bundle_dir, first.bundle_digest)
    record = json.loads((first.attempt_dir / "attempt.json").read_text())
    assert (first.plan_digest, first.bundle_digest, None) == (record["plan_digest"], record["bundle_digest"],
                                                              record["job_id"])


def test_a_damaged_bundle_is_refused_not_silently_reused(tmp_path) -> None:
    """Staging over a bundle whose file changed is an error naming the bundle (exit 2)."""
    plan = load_plan(PLANS / "single-node.json")
    first = stage(plan, tmp_path / "ws", FakeClock())
    target = first.bundle_dir / "entry.py"
    os.chmod(target, 0o644)
    target.write_text(target.read_text() + "\n")
    with pytest.raises(InvalidInput) as caught:
        stage(plan, tmp_path / "ws", FakeClock())
    assert "entry.py: checksum mismatch" in str(caught.value)


def test_bundle_is_read_only_and_pure_python(tmp_path) -> None:
    """Published files are read-only and no compiled extension is part of the runtime."""
    staged = stage(load_plan(PLANS / "single-node.json"), tmp_path / "ws", FakeClock())
    files = [p for p in staged.bundle_dir.rglob("*") if p.is_file()]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o444 for p in files)
    assert [] == [p for p in files if p.suffix in (".so", ".pyd", ".dylib")]
