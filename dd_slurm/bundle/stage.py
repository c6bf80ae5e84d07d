"""`dd-slurm stage`: publish the bundle (once per digest) and create one attempt dir atomically."""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import attrs

from dd_slurm.bundle.manifest import (
    MANIFEST_NAME,
    compile_bytecode,
    entry_sha256,
    manifest_of,
    planned_sources,
    read_manifest,
    verify_bundle,
    write_files,
)
from dd_slurm.clock import Clock
from dd_slurm.errors import InvalidInput
from dd_slurm.plan.fields import control_char
from dd_slurm.plan.io import canonical_json, plan_digest
from dd_slurm.plan.records import Plan
from dd_slurm.scheduler.render import ScriptContext, render_script
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import dump_json, write_atomic
from dd_slurm.store.attempt_record import new_record


@attrs.frozen
class Staged:
    attempt_id: str
    attempt_dir: Path
    bundle_dir: Path
    bundle_digest: str
    plan_digest: str
    job_name: str
    script: Path


def workspace_path(workspace: str | Path) -> Path:
    path = Path(workspace).expanduser().resolve()
    bad = control_char(str(path))
    if bad or "%" in str(path) or "," in str(path):
        raise InvalidInput(f"--workspace: {path!s:.80} contains {bad or 'a % or , character'}; choose a plain path")
    return path


def new_attempt_id(plan: Plan, clock: Clock) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(clock.wall()))
    return f"{plan.name}-{stamp}-{secrets.token_hex(3)}"


PRIVATE_DIRS = ("attempts", "bundles", "runs")


def private_workspace(workspace: Path) -> None:
    """The workspace and its attempts/, bundles/ and runs/ (shards), each created 0700 (whatever the umask) when
    missing; each must be a directory of this user that group and others cannot write to."""
    _private_dir(workspace, parents=True)
    for name in PRIVATE_DIRS:
        _private_dir(workspace / name)


def _private_dir(path: Path, parents: bool = False) -> None:
    try:
        path.mkdir(mode=0o700, parents=parents)
        path.chmod(0o700)
    except FileExistsError:
        pass
    refuse_unsafe(path, os.lstat(path), stat.S_ISDIR)


def refuse_unsafe(path: Path, status: os.stat_result, right_kind: Callable[[int], bool]) -> None:
    """InvalidInput (exit 2) naming `path` unless it is of the right kind (lstat: a symlink is
    not), owned by this user and not writable by group or others."""
    me = os.geteuid()
    if not right_kind(status.st_mode):
        problem = "is a symlink" if stat.S_ISLNK(status.st_mode) else "is not a directory or regular file"
    elif status.st_uid != me:
        problem = f"belongs to uid {status.st_uid}, not to you (uid {me})"
    elif status.st_mode & 0o022:
        problem = f"is writable by group or others (mode {stat.S_IMODE(status.st_mode):04o})"
    else:
        return
    raise InvalidInput(f"{path}: {problem}; dd-slurm stages only where you alone can write")


def refuse_unsafe_bundle(bundle: Path) -> None:
    """The published bundle and everything in it: dirs and regular files of this user, that
    nobody else can change (after they are verified, or ever)."""
    refuse_unsafe(bundle, os.lstat(bundle), stat.S_ISDIR)
    for root, dirs, names in os.walk(bundle):
        for name in dirs + names:
            path = Path(root, name)
            kind = stat.S_ISDIR if name in dirs else stat.S_ISREG
            refuse_unsafe(path, os.lstat(path), kind)


def ensure_bundle(workspace: Path) -> tuple[str, Path]:
    """Publish the bundle under bundles/<sources digest>/ unless an intact one is there already;
    returns the bundle's digest (which covers its bytecode too) and its dir. The workspace is made
    private first (`private_workspace`): attempts/ too is ready afterwards."""
    private_workspace(workspace)
    sources_digest, sources = planned_sources()
    final = workspace / "bundles" / sources_digest
    if os.path.lexists(final):
        return _existing(final, sources_digest), final
    tmp = final.parent / f".tmp-{sources_digest[:12]}-{os.getpid()}-{secrets.token_hex(2)}"
    try:
        manifest = _write_bundle(tmp, sources, sources_digest)
        os.rename(tmp, final)
    except OSError:
        if not final.exists():
            raise
        return _existing(final, sources_digest), final
    finally:
        if tmp.exists():
            _make_writable(tmp)
            shutil.rmtree(tmp)
    return manifest["digest"], final


def _existing(final: Path, sources_digest: str) -> str:
    refuse_unsafe_bundle(final)
    problems = verify_bundle(final)
    try:
        manifest = read_manifest(final)
    except (OSError, ValueError):
        manifest = {}
    if not problems and manifest.get("sources_digest") != sources_digest:
        problems = [f"{MANIFEST_NAME}: its sources are not {sources_digest}"]
    if problems:
        raise InvalidInput(f"{final}: staged bundle is damaged ({problems[0]}); remove it and stage again")
    return manifest["digest"]


def _write_bundle(tmp: Path, sources: dict[str, bytes | Path], sources_digest: str) -> dict:
    write_files(tmp, sources)
    compile_bytecode(tmp)
    for path in tmp.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    manifest = manifest_of(tmp, sources_digest)
    write_atomic(tmp / MANIFEST_NAME, dump_json(manifest), mode=0o444)
    for path in sorted(tmp.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    tmp.chmod(0o555)
    return manifest


def _make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def stage(plan: Plan, workspace: str | Path, clock: Clock, bin_dir: Optional[str] = None) -> Staged:
    ws = workspace_path(workspace)
    bundle_digest, bundle_dir = ensure_bundle(ws)
    attempt_id = new_attempt_id(plan, clock)
    attempts = ws / "attempts"  # made private by ensure_bundle
    final = attempts / attempt_id
    ctx = ScriptContext(attempt_id, str(final), str(bundle_dir), bundle_digest, plan_digest(plan), bin_dir,
                        entry_sha256=entry_sha256())
    tmp = attempts / f".tmp-{attempt_id}"
    tmp.mkdir(mode=0o700)
    try:
        _write_attempt(tmp, plan, ctx, clock)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return Staged(attempt_id, final, bundle_dir, bundle_digest, ctx.plan_digest, ctx.job_name, final / files.SCRIPT)


def _write_attempt(directory: Path, plan: Plan, ctx: ScriptContext, clock: Clock) -> None:
    for sub in (files.LOGS_DIR, files.RESULTS_DIR):
        (directory / sub).mkdir(mode=0o700)
    os.symlink(os.path.relpath(ctx.bundle_dir, directory.parent / ctx.attempt_id), directory / files.BUNDLE_LINK)
    write_atomic(directory / files.PLAN, canonical_json(plan), mode=0o400)
    write_atomic(directory / files.SCRIPT, render_script(plan, ctx).encode(), mode=0o500)
    write_atomic(directory / files.RECORD, new_record(
        attempt_id=ctx.attempt_id, plan_digest=ctx.plan_digest, bundle_digest=ctx.bundle_digest,
        bundle_dir=ctx.bundle_dir, job_name=ctx.job_name, staged_at=clock.wall(),
        reconcile_deadline_s=plan.runtime.reconcile_deadline_s,
    ))
