"""Node-local weights (runtime/node/weights.py) on this machine's disk, with real processes for
the interrupted and the concurrent copies."""

from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dd_slurm.runtime.node.weights import CHUNK, MANIFEST_SUFFIX, WeightsProblem, check, copy_path, space_problem, stage

ROOT = Path(__file__).resolve().parents[3]


def tree(top: Path, sizes: dict[str, int]) -> Path:
    """Files of the given sizes (pseudo-random bytes, so a wrong offset shows) under `top`."""
    for rel, size in sizes.items():
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    return top


def sparse_tree(top: Path, count: int, size: int) -> Path:
    """`count` files of `size` bytes, random at both ends and a hole between (copied as bytes,
    read from the page cache: slow enough to interrupt, cheap to make)."""
    top.mkdir()
    for i in range(count):
        with open(top / f"shard-{i}.bin", "wb") as handle:
            handle.write(os.urandom(1 << 20))
            handle.seek(size - (1 << 20))
            handle.write(os.urandom(1 << 20))
    return top


def same_tree(left: Path, right: Path) -> bool:
    """Byte for byte the same files under both (recursively)."""
    cmp = filecmp.dircmp(left, right)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    match, mismatch, errors = filecmp.cmpfiles(left, right, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(same_tree(left / d, right / d) for d in cmp.common_dirs)


SIZES = {"config.json": 100, "model-00001.safetensors": CHUNK + 12345, "sub/dir/tokenizer.json": 0,
         "sub/model-00002.safetensors": 3 * 1024 * 1024}


@pytest.mark.timeout(60)
def test_a_tree_is_copied_byte_for_byte_then_reused(tmp_path) -> None:
    """The first stage copies every file (a chunked one too) into the node's copy; the second finds
    its manifest equal to the source's and copies nothing."""
    source = tree(tmp_path / "model", SIZES)
    target = copy_path(str(source), str(tmp_path / "local" / "{node}"), "n1", None, os.getuid())
    first = stage(str(source), target, "n1")
    second = stage(str(source), target, "n1")
    assert (False, True, sum(SIZES.values()), 4, True) == (
        first["reused"], second["reused"], first["bytes"], first["files"], same_tree(source, Path(target)))
    assert str(tmp_path / "local" / "n1") == str(Path(target).parent.parent)


@pytest.mark.timeout(60)
def test_a_single_file_is_staged_as_a_file(tmp_path) -> None:
    """A weights file is copied to a file of the same name."""
    source = tmp_path / "model.gguf"
    source.write_bytes(os.urandom(4096))
    target = copy_path(str(source), str(tmp_path / "local"), "n1", None, os.getuid())
    stage(str(source), target, "n1")
    assert (True, "model.gguf") == (filecmp.cmp(source, target, shallow=False), Path(target).name.split("-", 1)[1])


@pytest.mark.timeout(60)
def test_a_changed_source_is_copied_again(tmp_path) -> None:
    """A copy whose manifest no longer matches its source (a file rewritten) is not reused."""
    source = tree(tmp_path / "model", {"a.bin": 1000})
    target = copy_path(str(source), str(tmp_path / "local"), "n1", None, os.getuid())
    stage(str(source), target, "n1")
    (source / "a.bin").write_bytes(b"new")
    again = stage(str(source), target, "n1")
    assert (False, b"new") == (again["reused"], (Path(target) / "a.bin").read_bytes())


@pytest.mark.timeout(60)
def test_a_copy_without_its_manifest_is_never_used(tmp_path) -> None:
    """A copy renamed into place whose manifest was never written (killed in between) is copied again."""
    source = tree(tmp_path / "model", {"a.bin": 1000})
    target = copy_path(str(source), str(tmp_path / "local"), "n1", None, os.getuid())
    stage(str(source), target, "n1")
    Path(target + MANIFEST_SUFFIX).unlink()
    (Path(target) / "a.bin").write_bytes(b"torn")
    again = stage(str(source), target, "n1")
    assert (False, True) == (again["reused"], same_tree(source, Path(target)))


def stager(source: Path, target: str, node: str) -> subprocess.Popen:
    code = ("import json, sys; from dd_slurm.runtime.node.weights import stage; "
            "print(json.dumps(stage(sys.argv[1], sys.argv[2], sys.argv[3])), flush=True)")
    return subprocess.Popen([sys.executable, "-c", code, str(source), target, node], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)


def wait_for_partial(folder: Path) -> None:
    """Until a stager has begun writing a partial copy in `folder`."""
    deadline = time.monotonic() + 60
    while not list(folder.glob("*.partial.*")) and time.monotonic() < deadline:
        time.sleep(0.002)


@pytest.mark.timeout(120)
def test_a_copy_killed_halfway_is_never_used_and_the_next_one_is_whole(tmp_path) -> None:
    """A stager killed while it copies leaves a partial under another name and no manifest; the next
    stage removes the partial and makes a whole copy."""
    source = sparse_tree(tmp_path / "model", 2, 256 << 20)  # ~0.3 s to copy here: the kill lands inside it
    target = copy_path(str(source), str(tmp_path / "local"), "n1", None, os.getuid())
    proc = stager(source, target, "n1")
    folder = Path(target).parent
    wait_for_partial(folder)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = sorted(p.name.split(".")[-3] for p in folder.glob("*.partial.*"))
    assert (["partial"], False) == (left, Path(target + MANIFEST_SUFFIX).exists())
    again = stage(str(source), target, "n1")
    assert (False, True, []) == (again["reused"], same_tree(source, Path(target)), list(folder.glob("*.partial.*")))


@pytest.mark.timeout(120)
def test_two_nodes_sharing_one_local_dir_make_one_copy(tmp_path) -> None:
    """Two stagers of one copy (two nodes whose local_dir is one disk) while a third party holds the
    copy's lock: neither writes anything until it is released; then one copies, the other waits
    for it and reuses the copy, which is whole."""
    import fcntl

    source = tree(tmp_path / "model", {f"shard-{i}.bin": 4 * 1024 * 1024 for i in range(8)})
    target = copy_path(str(source), str(tmp_path / "shared"), "n1", None, os.getuid())
    Path(target).parent.mkdir(parents=True, mode=0o700)
    with open(target + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = [stager(source, target, node) for node in ("n1", "n2")]
        time.sleep(1.0)  # both have started and reached the lock by now (a Python start-up is ~0.1 s)
        written_while_locked = sorted(p.name for p in Path(target).parent.iterdir() if not p.name.endswith(".lock"))
    answers = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert ([], [False, True], True) == (written_while_locked, sorted(a["reused"] for a in answers),
                                         same_tree(source, Path(target)))


def test_a_missing_source_is_weights_missing(tmp_path) -> None:
    """The probe's check and the stager both name a missing source with `weights_missing`."""
    target = copy_path(str(tmp_path / "nope"), str(tmp_path / "local"), "n1", None, os.getuid())
    with pytest.raises(WeightsProblem) as caught:
        stage(str(tmp_path / "nope"), target, "n1")
    assert ("weights_missing", "weights_missing") == (caught.value.reason, check(str(tmp_path / "nope"), target)[0]["reason"])


def test_no_room_is_reported_with_what_is_needed_and_free(tmp_path) -> None:
    """More bytes than the file system has free: a problem naming both numbers; what fits: none."""
    problem = space_problem(str(tmp_path / "local" / "x" / "copy"), 1 << 62)
    assert (True, None) == (problem is not None and "bytes needed" in problem and "free in" in problem,
                            space_problem(str(tmp_path / "copy"), 1))


def test_a_directory_open_to_others_is_refused(tmp_path) -> None:
    """The per-user directory under local_dir must be private: one left open (mode 0777) is refused."""
    source = tree(tmp_path / "model", {"a.bin": 10})
    target = copy_path(str(source), str(tmp_path / "local"), "n1", None, os.getuid())
    Path(target).parent.mkdir(parents=True)
    Path(target).parent.chmod(0o777)
    with pytest.raises(WeightsProblem) as caught:
        stage(str(source), target, "n1")
    assert "weights_staging" == caught.value.reason


def test_the_copy_goes_to_slurm_tmpdir_else_tmp_and_is_named_by_the_source() -> None:
    """null local_dir: $SLURM_TMPDIR, else /tmp; {node} is the node's name; two sources with one
    base name get two copies."""
    assert ["/scratch/job/dd-slurm-weights-7", "/tmp/dd-slurm-weights-7", "/l/n3/dd-slurm-weights-7"] == [
        os.path.dirname(copy_path("/m/a", None, "n1", "/scratch/job", 7)),
        os.path.dirname(copy_path("/m/a", None, "n1", None, 7)), os.path.dirname(copy_path("/m/a", "/l/{node}", "n3", None, 7))]
    assert copy_path("/m/a", None, "n", None, 0) != copy_path("/n/a", None, "n", None, 0)
