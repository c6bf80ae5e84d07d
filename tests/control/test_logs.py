"""`dd-slurm logs`: names, listing, printing and following an attempt's logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.clock import FakeClock
from dd_slurm.control.logs import find_log, follow, human_size, list_logs
from dd_slurm.errors import InvalidInput

FILES = {"batch-77.out": b"batch says hi\n", "client.log": b"client\n" * 300, "deploy-big-0.log": b"loading\n",
         "deploy-big-1.log": b"", "preflight.log": b"ok\n"}


def attempt(tmp_path: Path, files: dict[str, bytes] = FILES, done: bool = False) -> Path:
    directory = tmp_path / "attempt-1"
    (directory / "logs").mkdir(parents=True)
    (directory / "plan.json").write_text("{}")
    for name, data in files.items():
        (directory / "logs" / name).write_bytes(data)
    if done:
        entry = {"kind": "transition", "from": "cleanup", "to": "done", "outcome": "succeeded", "reason": "ok",
                 "seq": 0, "trigger": "finish", "ts": 1.0, "time": "t"}
        (directory / "journal.jsonl").write_text(json.dumps(entry) + "\n")
    return directory


def test_listing_names_sizes_and_the_batch_log_first(tmp_path) -> None:
    """Each file in logs/ under its name without suffix; the batch log is `batch`, listed first."""
    found = [(log.name, log.size) for log in list_logs(attempt(tmp_path))]
    assert [("batch", 14), ("client", 2100), ("deploy-big-0", 8), ("deploy-big-1", 0), ("preflight", 3)] == found


@pytest.mark.parametrize(("name", "file"), [("batch", "batch-77.out"), ("supervisor", "batch-77.out"),
                                            ("client", "client.log"), ("deploy-big-1", "deploy-big-1.log")])
def test_names_mean_files(tmp_path, name: str, file: str) -> None:
    """`supervisor` is the batch log (the batch script execs the supervisor)."""
    assert file == find_log(attempt(tmp_path), name).name


def test_a_supervisor_log_of_its_own_wins(tmp_path) -> None:
    """When the runtime writes logs/supervisor.log, `supervisor` means that file."""
    directory = attempt(tmp_path, {**FILES, "supervisor.log": b"s\n"})
    assert "supervisor.log" == find_log(directory, "supervisor").name


def test_the_newest_batch_log_is_batch_and_older_ones_keep_their_job_id(tmp_path) -> None:
    """A requeued or resubmitted job leaves two batch logs: the newer one is `batch`."""
    directory = attempt(tmp_path, {"batch-5.out": b"old\n", "batch-9.out": b"new\n"})
    os.utime(directory / "logs" / "batch-5.out", (1, 1))
    assert ["batch", "batch-5"] == [log.name for log in list_logs(directory)]
    assert "batch-9.out" == find_log(directory, "batch").name


@pytest.mark.parametrize("name", ["../plan", "nope", "logs/client", ""])
def test_unknown_names_are_an_error_listing_the_known_ones(tmp_path, name: str) -> None:
    """Only listed names resolve: no paths, nothing outside logs/."""
    with pytest.raises(InvalidInput) as caught:
        find_log(attempt(tmp_path), name)
    assert "known: batch, client, deploy-big-0, deploy-big-1, preflight" in str(caught.value)


def test_symlinks_are_not_logs(tmp_path) -> None:
    """A symlink planted in logs/ is neither listed nor opened."""
    directory = attempt(tmp_path)
    (directory / "logs" / "secret.log").symlink_to("/etc/passwd")
    assert "secret" not in [log.name for log in list_logs(directory)]


@pytest.mark.parametrize(("size", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (5 << 20, "5.0 MiB")])
def test_human_sizes(size: int, text: str) -> None:
    assert text == human_size(size)


class GrowingClock(FakeClock):
    """Each sleep appends the next chunk (or truncates, for b"")."""

    def __init__(self, path: Path, chunks: list[bytes]) -> None:
        super().__init__()
        self.path, self.chunks, self.sleeps = path, list(chunks), 0

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleeps += 1
        if self.chunks:
            chunk = self.chunks.pop(0)
            with open(self.path, "ab" if chunk else "wb") as handle:
                handle.write(chunk)


def test_follow_prints_appends_and_ends_once_finished_and_quiet(tmp_path) -> None:
    """Everything written before and during following is printed once, in order; following ends
    only when the attempt is finished and the file stopped growing."""
    path = tmp_path / "client.log"
    path.write_bytes(b"one\n")
    clock = GrowingClock(path, [b"two\n", b"three\n"])
    out: list[bytes] = []
    follow(path, lambda: clock.sleeps >= 1, clock, out.append, quiet_polls=2)
    assert (b"one\ntwo\nthree\n", 4) == (b"".join(out), clock.sleeps)


def test_follow_waits_for_a_log_that_does_not_exist_yet_and_rereads_a_truncated_one(tmp_path) -> None:
    """A pending job's log appears later; a truncated log is read again from its start."""
    path = tmp_path / "batch-1.out"
    clock = GrowingClock(path, [b"", b"first\n", b"", b"again\n"])
    out: list[bytes] = []
    follow(path, lambda: not clock.chunks, clock, out.append)
    assert b"first\nagain\n" == b"".join(out)


def test_cli_lists_prints_and_rejects(dd_slurm_exe, tmp_path) -> None:
    """`logs DIR` lists, `logs DIR NAME` prints the bytes, an unknown name is one line, exit 2."""
    directory = attempt(tmp_path)
    listing = subprocess.run(dd_slurm_exe + ["logs", str(directory)], capture_output=True, text=True, timeout=30)
    printed = subprocess.run(dd_slurm_exe + ["logs", str(directory), "client"], capture_output=True, timeout=30)
    bad = subprocess.run(dd_slurm_exe + ["logs", str(directory), "nope"], capture_output=True, text=True, timeout=30)
    assert (0, 5) == (listing.returncode, len(listing.stdout.splitlines()))
    assert "client           2.1 KiB  logs/client.log" == listing.stdout.splitlines()[1]  # relative to the dir
    assert (0, FILES["client.log"]) == (printed.returncode, printed.stdout)
    assert (2, 1) == (bad.returncode, len(bad.stderr.splitlines()))


def test_cli_follow_ends_by_itself_on_a_done_attempt(dd_slurm_exe, tmp_path) -> None:
    """`logs -f` of a finished attempt prints the log and exits 0 once it stays quiet."""
    directory = attempt(tmp_path, done=True)
    out = subprocess.run(dd_slurm_exe + ["logs", "-f", str(directory), "batch"], capture_output=True, timeout=30)
    assert (0, b"batch says hi\n", b"") == (out.returncode, out.stdout, out.stderr)


def test_cli_follow_stops_cleanly_on_ctrl_c(dd_slurm_exe, tmp_path) -> None:
    """Ctrl-C while following a live attempt: what was printed stays, exit 0, nothing on stderr."""
    directory = attempt(tmp_path)
    proc = subprocess.Popen(dd_slurm_exe + ["logs", "-f", str(directory), "preflight"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert b"ok\n" == proc.stdout.readline()
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert (0, b"", b"") == (proc.returncode, out, err)


def test_following_waits_for_a_log_that_appears_later(tmp_path) -> None:
    """`-f client` before the client started: wait for its log while the attempt runs; a name
    that never appears is an error once the attempt is finished."""
    from dd_slurm.control.logs import await_log

    directory = attempt(tmp_path, {"batch-77.out": b""})

    class Appearing(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            (directory / "logs" / "client.log").write_bytes(b"x\n")

    assert "client.log" == await_log(directory, "client", lambda: False, Appearing()).name
    with pytest.raises(InvalidInput):
        await_log(directory, "deploy-x-0", lambda: True, FakeClock())


@settings(max_examples=50)
@given(st.text(max_size=40))
def test_any_name_resolves_inside_logs_or_is_refused(name: str) -> None:
    """Whatever NAME a user types: a regular file directly in logs/, or InvalidInput; never a path
    elsewhere, never another error."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        directory = attempt(Path(tmp))
        try:
            found = find_log(directory, name)
        except InvalidInput:
            return
        assert found.parent == directory / "logs" and found.is_file() and not found.is_symlink()
