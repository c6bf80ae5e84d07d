"""Parsers for sbatch --parsable, squeue and sacct output (pure functions, one pass each).

Formats requested by `commands`:
  squeue --noheader --format=%i|%T|%r|%j          job id | state | reason | name
  sacct  --noheader --parsable2 --format=JobID,State,ExitCode,Reason,JobName
A row that does not fit raises OutputError naming the line; blank and warning lines are skipped.
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple, Optional

from dd_slurm.errors import OutputError

SQUEUE_FORMAT = "%i|%T|%r|%j"
SACCT_FIELDS = "JobID,State,ExitCode,Reason,JobName"
_JOB = re.compile(r"(\d+)(?:_(\d+|\[[^\]]*\]))?(?:\+(\d+))?(?:\.([A-Za-z0-9_-]+))?\Z")
_EXIT = re.compile(r"(\d+):(\d+)\Z")
_WARNING = re.compile(r"^(sacct|squeue|slurm_\w+|WARNING|warning|error)\b")


class Row(NamedTuple):
    """One allocation row (steps are skipped). `task` is an array index, a range text, or None.
    A NamedTuple, not attrs: parsing 100,000 rows must stay well under a third of a second."""

    job: str
    task: Optional[str]
    het: Optional[int]
    raw_state: str
    reason: Optional[str]
    name: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None

    @property
    def is_range(self) -> bool:
        return self.task is not None and self.task.startswith("[")


def parse_sbatch(stdout: str) -> str:
    """`--parsable` prints `jobid` or `jobid;cluster`, possibly after warning lines."""
    for number, line in enumerate(stdout.splitlines(), 1):
        token = line.strip().split(";", 1)[0]
        if token.isdigit():
            return token
    raise OutputError(f"sbatch: no job id in output {stdout.strip()[:200]!r}")


def parse_job_token(token: str, tool: str, number: int) -> Optional[tuple[str, Optional[str], Optional[int]]]:
    """(job, task, het) for an allocation id; None for a step id (`123.batch`)."""
    if token.isdigit():
        return token, None, None
    job, sep, task = token.partition("_")
    if sep and job.isdigit() and task.isdigit():
        return job, task, None
    match = _JOB.match(token)
    if not match:
        raise OutputError(f"{tool} line {number}: unrecognised job id {token!r}")
    job, task, het, step = match.groups()
    if step is not None:
        return None
    return job, task, int(het) if het is not None else None


def _rows(text: str, tool: str, fields: int) -> Iterator[tuple[int, list[str]]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line[:1].isdigit() and (not line.strip() or _WARNING.match(line)):
            continue
        parts = line.split("|", fields - 1)
        if len(parts) != fields:
            raise OutputError(f"{tool} line {number}: expected {fields} fields, got {len(parts)}: {line[:120]!r}")
        yield number, parts


def parse_squeue(text: str) -> list[Row]:
    rows = []
    for number, (job_id, state, reason, name) in _rows(text, "squeue", 4):
        parsed = parse_job_token(job_id.strip(), "squeue", number)
        if parsed is None:
            continue
        if not state.strip():
            raise OutputError(f"squeue line {number}: empty state")
        rows.append(Row(parsed[0], parsed[1], parsed[2], state.strip(), _reason(reason), name))
    return rows


def parse_sacct(text: str) -> list[Row]:
    """Allocation rows; a job's signal comes from its `.batch` step when the job row has none
    (a cancelled job reads `CANCELLED by 0|0:0`, its batch step `CANCELLED|0:15`)."""
    rows, batch_signal = [], {}
    for number, (job_id, state, exit_code, reason, name) in _rows(text, "sacct", 5):
        token = job_id.strip()
        parsed = parse_job_token(token, "sacct", number)
        if not state.strip():
            raise OutputError(f"sacct line {number}: empty state")
        code, sig = parse_exit_code(exit_code, number)
        if parsed is None:
            if token.endswith(".batch") and sig:
                batch_signal[token[: -len(".batch")]] = sig
            continue
        rows.append(Row(parsed[0], parsed[1], parsed[2], state.strip(), _reason(reason), name, code, sig))
    if batch_signal:
        rows = [_with_batch_signal(row, batch_signal) for row in rows]
    return rows


def _with_batch_signal(row: Row, batch_signal: dict[str, int]) -> Row:
    key = f"{row.job}_{row.task}" if row.task else row.job
    if row.signal or key not in batch_signal:
        return row
    return row._replace(signal=batch_signal[key])


def parse_exit_code(text: str, number: int = 0) -> tuple[Optional[int], Optional[int]]:
    code, sep, sig = text.partition(":")
    if sep and code.isdigit() and sig.isdigit():
        return int(code), int(sig)
    text = text.strip()
    if not text:
        return None, None
    match = _EXIT.match(text)
    if not match:
        raise OutputError(f"sacct line {number}: unrecognised exit code {text!r}")
    return int(match.group(1)), int(match.group(2))


def expand_tasks(spec: str) -> list[int]:
    """`[2-9%2]` -> 2..9; `[1,3,5-7]` -> 1,3,5,6,7. The `%N` throttle is not a task."""
    body = spec.strip("[]").split("%", 1)[0]
    tasks: list[int] = []
    for part in body.split(","):
        span, _, step = part.partition(":")
        low, _, high = span.partition("-")
        if not low.isdigit() or not (high.isdigit() or not high) or not (step.isdigit() or not step) or step == "0":
            raise OutputError(f"unrecognised array range {spec!r}")
        tasks.extend(range(int(low), int(high or low) + 1, int(step or 1)))
    return tasks


def _reason(text: str) -> Optional[str]:
    if text == "None":
        return None
    text = text.strip()
    return None if text in ("", "None", "(null)") else text
