"""The append-only transition journal of one attempt, rewritten atomically on every entry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from dd_slurm.clock import Clock, iso
from dd_slurm.errors import AttemptDirError
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_atomic


class Journal:
    """One writer per attempt. Readers in other processes see whole files only."""

    def __init__(self, attempt_dir: Path, clock: Clock) -> None:
        self.path = Path(attempt_dir) / files.JOURNAL
        self._clock = clock
        self._lines: list[bytes] = [json.dumps(e, sort_keys=True).encode() for e in read_journal(self.path)]

    def append(self, kind: str, source: str, dest: str, trigger: str, **extra: Any) -> dict[str, Any]:
        now = self._clock.wall()
        entry = {"seq": len(self._lines), "kind": kind, "time": iso(now), "ts": now,
                 "from": source, "to": dest, "trigger": trigger}
        entry.update({k: v for k, v in extra.items() if v is not None})
        self._lines.append(json.dumps(entry, sort_keys=True).encode())
        write_atomic(self.path, b"\n".join(self._lines) + b"\n")
        return entry

    def entries(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self._lines]


def read_journal(path: Path) -> list[dict[str, Any]]:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    except OSError as err:
        raise AttemptDirError(f"cannot read {path}: {err.strerror}") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            entries.append(json.loads(line))
        except ValueError:
            raise AttemptDirError(f"{path}:{number}: not a JSON journal entry") from None
    return entries


def current_state(entries: list[dict[str, Any]], initial: str) -> str:
    moves = [e for e in entries if e.get("kind") == "transition"]
    return moves[-1]["to"] if moves else initial


def final_entry(entries: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The entry that reached `done`, carrying the outcome and reason."""
    ends = [e for e in entries if e.get("kind") == "transition" and e.get("outcome")]
    return ends[-1] if ends else None
