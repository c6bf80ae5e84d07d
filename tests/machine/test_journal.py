"""The journal: durable, append-only, and never torn for a reader in another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from dd_slurm.clock import FakeClock
from dd_slurm.machine.journal import Journal, read_journal

READER = textwrap.dedent("""
    import json, sys, time
    path, final = sys.argv[1], int(sys.argv[2])
    print("ready", flush=True)
    seen, partial, torn = 0, set(), 0
    deadline = time.monotonic() + 50
    while seen < final and time.monotonic() < deadline:
        try:
            text = open(path).read()
        except FileNotFoundError:
            continue
        lines = text.splitlines()
        if text and not text.endswith("\\n"):
            torn += 1
        for line in lines:
            try:
                json.loads(line)
            except ValueError:
                torn += 1
        if len(lines) < seen:  # append-only: a reader must never see it shrink
            torn += 1
        seen = max(seen, len(lines))
        if 0 < len(lines) < final:
            partial.add(len(lines))
    print(seen, len(partial), torn)
""")


def test_reader_in_another_process_never_sees_a_torn_journal(tmp_path) -> None:
    """While one process appends 400 entries, a concurrent reader (started first, reading until it
    sees all 400) parses every line of every version it reads, never sees the file shrink, and
    really overlapped the writer: it read many intermediate versions."""
    path = tmp_path / "journal.jsonl"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), "400"], stdout=subprocess.PIPE, text=True)
    assert "ready" == reader.stdout.readline().strip()
    journal = Journal(tmp_path, FakeClock())
    for index in range(400):
        journal.append("transition", "a", "b", "t", detail="x" * (index % 50))
    out, _ = reader.communicate(timeout=60)
    seen, intermediate, torn = map(int, out.split())
    assert (400, 0) == (seen, torn)
    assert intermediate >= 10, f"the reader saw only {intermediate} intermediate versions: no real overlap"
    assert 400 == len(read_journal(path))


def test_a_new_journal_object_continues_the_sequence(tmp_path) -> None:
    """Reopening the journal (a fresh process) appends after the existing entries."""
    Journal(tmp_path, FakeClock()).append("transition", "staged", "verified", "verify")
    entry = Journal(tmp_path, FakeClock()).append("transition", "verified", "preflight", "start_preflight")
    assert 1 == entry["seq"]
    assert [0, 1] == [e["seq"] for e in read_journal(tmp_path / "journal.jsonl")]


def test_no_temp_files_are_left_behind(tmp_path) -> None:
    """Atomic writes leave only the journal itself in the directory."""
    journal = Journal(tmp_path, FakeClock())
    for _ in range(5):
        journal.append("transition", "a", "b", "t")
    assert ["journal.jsonl"] == sorted(p.name for p in tmp_path.iterdir())
