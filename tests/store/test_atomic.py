"""write_atomic's temporary file: an unpredictable name, created exclusively and never through a
symlink, and gone again when the write fails."""

from __future__ import annotations

import os

import pytest

from dd_slurm.store.atomic import random_temp_name, write_atomic


def test_a_symlink_at_the_old_predictable_temp_name_is_not_followed(tmp_path) -> None:
    """A symlink planted at `.{name}.{pid}.tmp` (the name this process used to pick) pointing at
    a victim: the victim keeps its bytes and the target gets the data as a regular file."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    target = tmp_path / "state.json"
    os.symlink(victim, tmp_path / f".state.json.{os.getpid()}.tmp")
    write_atomic(target, b"new")
    assert (b"precious", b"new", False) == (victim.read_bytes(), target.read_bytes(), target.is_symlink())


def test_temp_names_are_unpredictable() -> None:
    """Two calls name two different temp files, neither derived from the pid."""
    first, second = random_temp_name("state.json"), random_temp_name("state.json")
    assert (True, False) == (first != second, str(os.getpid()) in first + second)
    assert (True, True) == (first.startswith(".state.json."), first.endswith(".tmp"))


def test_an_existing_file_at_the_chosen_name_is_never_truncated(tmp_path) -> None:
    """The temp file is created with O_EXCL: a file already at its name is an error, left as it was,
    and the target is not written."""
    planted = tmp_path / ".fixed.tmp"
    planted.write_bytes(b"someone else's")
    with pytest.raises(FileExistsError):
        write_atomic(tmp_path / "state.json", b"new", temp_name=lambda _name: ".fixed.tmp")
    assert (b"someone else's", False) == (planted.read_bytes(), (tmp_path / "state.json").exists())


def test_a_symlink_at_the_chosen_name_is_never_followed(tmp_path) -> None:
    """Even a dangling symlink at the temp name is refused, so nothing is created where it points."""
    os.symlink(tmp_path / "elsewhere", tmp_path / ".fixed.tmp")
    with pytest.raises(FileExistsError):
        write_atomic(tmp_path / "state.json", b"new", temp_name=lambda _name: ".fixed.tmp")
    assert (False, True) == ((tmp_path / "elsewhere").exists(), (tmp_path / ".fixed.tmp").is_symlink())


def test_a_failed_write_leaves_no_temp_file(tmp_path) -> None:
    """The rename fails (the target is a directory): the error propagates and only the target
    dir is left."""
    (tmp_path / "state.json").mkdir()
    (tmp_path / "state.json" / "inside").write_text("x")
    with pytest.raises(OSError):
        write_atomic(tmp_path / "state.json", b"new")
    assert ["state.json"] == sorted(p.name for p in tmp_path.iterdir())



def test_the_entry_points_refusal_record_follows_no_planted_symlink(tmp_path) -> None:
    """entry.py's own atomic write (it runs before any bundle module may be imported): a symlink
    at its old temp name `cleanup.json.{pid}.entry.tmp` is not followed, the refusal is recorded."""
    from dd_slurm.bundle.entry import _record_refusal

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    attempt = tmp_path / "attempt"
    attempt.mkdir()
    for name in ("cleanup.json", "journal.jsonl"):
        os.symlink(victim, attempt / f"{name}.{os.getpid()}.entry.tmp")
    _record_refusal(str(attempt), "bundle: checksum mismatch")
    assert (b"precious", False) == (victim.read_bytes(), (attempt / "cleanup.json").is_symlink())
    assert "bundle_checksum" in (attempt / "journal.jsonl").read_text()
