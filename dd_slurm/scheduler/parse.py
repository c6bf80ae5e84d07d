"""Parsers for sbatch --parsable, squeue and sacct output (pure functions, one pass each).

Formats requested by `commands` (with `raw_ids=True`):
  squeue --noheader --format=%i|%A|%T|%r|%j          job id | raw job id | state | reason | name
  sacct  --noheader --parsable2 --format=JobID,JobIDRaw,State,ExitCode,Reason,JobName
Without `raw_ids`, the older formats without the raw id column (`%i|%T|%r|%j`,
`JobID,State,ExitCode,Reason,JobName`), as in the recorded fixtures. A row that does not fit raises
OutputError naming the line; blank and warning lines are skipped. Numbers are ASCII digits of at
most 10 characters (Slurm's ids are 32-bit), so no text can make `int()` itself fail.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import compress, repeat
from operator import not_
from typing import NamedTuple, Optional

from dd_slurm.errors import OutputError

SQUEUE_FORMAT = "%i|%A|%T|%r|%j"
SACCT_FIELDS = "JobID,JobIDRaw,State,ExitCode,Reason,JobName"
SQUEUE_FORMAT_NO_RAW = "%i|%T|%r|%j"
SACCT_FIELDS_NO_RAW = "JobID,State,ExitCode,Reason,JobName"
MAX_ID = 2**32 - 1
MAX_ARRAY_TASKS = 4_000_001  # Slurm's upper bound for MaxArraySize
_NUM = r"[0-9]{1,10}"
# job [_task | _[range]] [+het] [.step]; a step is anything after the dot (`.batch`, `.0+0`, `.ext+`)
_JOB = re.compile(rf"({_NUM})(?:_({_NUM}|\[[^\]]*\]))?(?:\+({_NUM}))?(\..+)?\Z", re.ASCII)
_SBATCH_ID = re.compile(r"[1-9][0-9]{0,9}\Z", re.ASCII)
_EXIT = re.compile(rf"({_NUM}):({_NUM})\Z", re.ASCII)
_WARNING = re.compile(r"^(sacct|squeue|slurm_\w+|WARNING|warning|error)\b")
# Plain lines, which the line-by-line checks would pass unchanged: a job number of at most 9 digits
# (no leading zero, so <= 2**32-1), an optional task of at most 7 digits, a raw id like the job's
# (a step row's raw id is not read), a state without surrounding blanks, `N:N` exit codes, a reason
# of word characters; the name is the rest of the line. Lines are split as str.splitlines splits
# them only if the text has no other line break than \n (`_ODD_LINE_BREAKS`).
_ID, _TASK, _STATE = r"([1-9][0-9]{0,8})", r"(?:_([0-9]{1,7}))?", r"([A-Z][A-Za-z0-9_+]*(?: [A-Za-z0-9_+]+)*)"
_SACCT_PLAIN = re.compile(rf"^{_ID}{_TASK}(?:(\.[A-Za-z0-9_+]+)\|[^|\n]*|\|{_ID})\|{_STATE}"
                          r"\|([0-9]{1,10}):([0-9]{1,10})\|([A-Za-z0-9_]*)\|(.*)$", re.ASCII | re.MULTILINE)
_SQUEUE_PLAIN = re.compile(rf"^{_ID}{_TASK}\|{_ID}\|{_STATE}\|([A-Za-z0-9_]*)\|(.*)$", re.ASCII | re.MULTILINE)
_ODD_LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_NO_REASON = {"": None, "None": None}
_NO_TASK = {"": None}
_new_row = tuple.__new__


class _Numbers(dict[str, int]):
    """Exit code and signal texts to ints: 0..255 looked up, any other (ASCII digits) parsed."""

    def __missing__(self, text: str) -> int:
        return int(text)


_NUMBER = _Numbers((str(n), n) for n in range(256))


class Row(NamedTuple):
    """One allocation row (steps are skipped). `task` is an array index, a range text, or None;
    `raw` is Slurm's raw job id of the row (an array task's own id), when requested.
    A NamedTuple, not attrs: parsing 100,000 rows must stay well under a third of a second."""

    job: str
    task: Optional[str]
    het: Optional[int]
    raw_state: str
    reason: Optional[str]
    name: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    raw: Optional[str] = None

    @property
    def is_range(self) -> bool:
        return self.task is not None and self.task.startswith("[")


def is_job_number(token: str) -> bool:
    """ASCII digits naming a job Slurm could have created: 1 .. 2**32-1, no leading zero."""
    return bool(_SBATCH_ID.match(token)) and int(token) <= MAX_ID


def parse_sbatch(stdout: str) -> str:
    """`--parsable` prints `jobid` or `jobid;cluster`, possibly after warning lines."""
    for line in stdout.splitlines():
        token = line.strip().split(";", 1)[0]
        if is_job_number(token):
            return token
    raise OutputError(f"sbatch: no job id in output {stdout.strip()[:200]!r}")


_CLUSTER_NAME = re.compile(r"^ClusterName\s*=\s*([A-Za-z0-9][A-Za-z0-9._-]{0,63})\s*$", re.ASCII | re.MULTILINE)


def parse_cluster_name(text: str) -> Optional[str]:
    """ClusterName from `scontrol show config`; None when it says none (or nothing a name could be)."""
    found = _CLUSTER_NAME.search(text)
    return found.group(1) if found else None


def parse_job_token(token: str, tool: str, number: int) -> Optional[tuple[str, Optional[str], Optional[int]]]:
    """(job, task, het) for an allocation id; None for a step id (`123.batch`, `1234.0+0`)."""
    if token.isascii() and token.isdigit() and len(token) < 10 and token[0] != "0":
        return token, None, None
    job, sep, task = token.partition("_")  # the common array task, `123_4`, without the regex
    if sep and job.isascii() and job.isdigit() and len(job) < 10 and job[0] != "0" and task.isascii() \
            and task.isdigit() and len(task) < 8:
        return job, task, None
    match = _JOB.match(token)
    if not match or not is_job_number(match.group(1)):
        raise OutputError(f"{tool} line {number}: unrecognised job id {token[:60]!r}")
    job, task, het, step = match.groups()
    if step is not None:
        return None
    if task is not None and task.startswith("["):
        try:
            count_tasks(task)
        except OutputError as err:
            raise OutputError(f"{tool} line {number}: {err}") from None
    return job, task, int(het) if het is not None else None


def _rows(text: str, tool: str, fields: int) -> Iterator[tuple[int, list[str]]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line[:1].isdigit() and (not line.strip() or _WARNING.match(line)):
            continue
        parts = line.split("|", fields - 1)
        if len(parts) != fields:
            raise OutputError(f"{tool} line {number}: expected {fields} fields, got {len(parts)}: {line[:120]!r}")
        yield number, parts


def parse_squeue(text: str, raw_ids: bool = False) -> list[Row]:
    """Plain output (the raw-id format) in one regex pass, any other line by line."""
    with _no_collection():
        plain = _plain_lines(_SQUEUE_PLAIN, text) if raw_ids else None
        return parse_squeue_lines(text, raw_ids) if plain is None else _plain_squeue_rows(plain)


def parse_squeue_lines(text: str, raw_ids: bool = False) -> list[Row]:
    """squeue rows checked line by line (`parse_squeue` for plain output must agree with it)."""
    rows = []
    for number, parts in _rows(text, "squeue", 5 if raw_ids else 4):
        if raw_ids:
            job_id, raw_text, state, reason, name = parts
        else:
            job_id, state, reason, name = parts
        parsed = parse_job_token(job_id.strip(), "squeue", number)
        if parsed is None:
            continue
        if not state.strip():
            raise OutputError(f"squeue line {number}: empty state")
        raw = _raw_id(raw_text, "squeue", number) if raw_ids else None
        rows.append(Row(parsed[0], parsed[1], parsed[2], state.strip(), _reason(reason), name, raw=raw))
    return rows


def parse_sacct(text: str, raw_ids: bool = False) -> list[Row]:
    """Allocation rows; a job's signal comes from its `.batch` step when the job row has none
    (a cancelled job reads `CANCELLED by 0|0:0`, its batch step `CANCELLED|0:15`). Plain output
    (the raw-id format) in one regex pass, any other line by line."""
    with _no_collection():
        plain = _plain_lines(_SACCT_PLAIN, text) if raw_ids else None
        return parse_sacct_lines(text, raw_ids) if plain is None else _plain_sacct_rows(plain)


def parse_sacct_lines(text: str, raw_ids: bool = False) -> list[Row]:
    """sacct rows checked line by line (`parse_sacct` for plain output must agree with it)."""
    rows, batch_signal = [], {}
    for number, parts in _rows(text, "sacct", 6 if raw_ids else 5):
        if raw_ids:
            job_id, raw_text, state, exit_code, reason, name = parts
        else:
            job_id, state, exit_code, reason, name = parts
        token = job_id.strip()
        parsed = parse_job_token(token, "sacct", number)
        if not state.strip():
            raise OutputError(f"sacct line {number}: empty state")
        code, sig = parse_exit_code(exit_code, number)
        if parsed is None:
            if token.endswith(".batch") and sig:
                batch_signal[token[: -len(".batch")]] = sig
            continue
        raw = _raw_id(raw_text, "sacct", number) if raw_ids else None
        rows.append(Row(parsed[0], parsed[1], parsed[2], state.strip(), _reason(reason), name, code, sig, raw))
    if batch_signal:
        rows = [_with_batch_signal(row, batch_signal) for row in rows]
    return rows


@contextmanager
def _no_collection() -> Iterator[None]:
    """No garbage collection while rows are built: they are new tuples of strings and ints (no
    cycle to find), yet each collection on the way would walk every row built so far (it took a
    third of the time of 100,000 rows). Collection resumes, if it was on, when the parse ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plain_lines(pattern: re.Pattern[str], text: str) -> Optional[list[tuple[str, ...]]]:
    """Every line's fields when every line is plain (see `_SACCT_PLAIN`), else None: the checks
    of the line-by-line parse, then, hold by construction for the whole text in one regex pass."""
    if any(odd in text for odd in _ODD_LINE_BREAKS):
        return None
    found = pattern.findall(text)
    lines = text.count("\n") + (not text.endswith("\n") and text != "")
    return found if len(found) == lines else None


def _plain_sacct_rows(plain: list[tuple[str, ...]]) -> list[Row]:
    """Rows of plain sacct lines, built column by column (C loops: no Python code per row)."""
    if not plain:
        return []
    jobs, tasks, steps, raws, states, codes, signals, reasons, names = zip(*plain)
    rows = list(map(_new_row, repeat(Row), zip(jobs, map(_NO_TASK.get, tasks, tasks), repeat(None), states,
                                               map(_NO_REASON.get, reasons, reasons), names,
                                               map(_NUMBER.__getitem__, codes), map(_NUMBER.__getitem__, signals),
                                               raws)))
    if not any(steps):
        return rows
    rows = list(compress(rows, map(not_, steps)))
    batch_signal = {f"{job}_{task}" if task else job: int(signal) for job, task, step, signal
                    in zip(jobs, tasks, steps, signals) if step == ".batch" and int(signal)}
    return [_with_batch_signal(row, batch_signal) for row in rows] if batch_signal else rows


def _plain_squeue_rows(plain: list[tuple[str, ...]]) -> list[Row]:
    """Rows of plain squeue lines, column by column like `_plain_sacct_rows`."""
    if not plain:
        return []
    jobs, tasks, raws, states, reasons, names = zip(*plain)
    return list(map(_new_row, repeat(Row), zip(jobs, map(_NO_TASK.get, tasks, tasks), repeat(None), states,
                                              map(_NO_REASON.get, reasons, reasons), names, repeat(None),
                                              repeat(None), raws)))


def _raw_id(text: str, tool: str, number: int) -> Optional[str]:
    if text.isascii() and text.isdigit() and len(text) < 10 and text[0] != "0":
        return text
    text = text.strip()
    if is_job_number(text):
        return text
    raise OutputError(f"{tool} line {number}: unrecognised raw job id {text[:60]!r}")


def _with_batch_signal(row: Row, batch_signal: dict[str, int]) -> Row:
    key = f"{row.job}_{row.task}" if row.task else row.job
    if row.signal or key not in batch_signal:
        return row
    return row._replace(signal=batch_signal[key])


def parse_exit_code(text: str, number: int = 0) -> tuple[Optional[int], Optional[int]]:
    code, sep, sig = text.partition(":")
    if sep and code.isascii() and sig.isascii() and code.isdigit() and sig.isdigit() and len(code) < 11 > len(sig):
        return int(code), int(sig)
    text = text.strip()
    if not text:
        return None, None
    match = _EXIT.match(text)
    if not match:
        raise OutputError(f"sacct line {number}: unrecognised exit code {text[:60]!r}")
    return int(match.group(1)), int(match.group(2))


def _spans(spec: str) -> Iterator[tuple[int, int, int]]:
    """(low, high, step) of each part of `[2-9%2]` / `[1,3,5-7]` / `[0-6:3]`; OutputError if malformed."""
    body = spec[1:-1] if spec.startswith("[") and spec.endswith("]") else spec
    body = body.split("%", 1)[0]
    for part in body.split(","):
        span, _, step = part.partition(":")
        low, dash, high = span.partition("-")
        numbers = (low, high) if dash else (low,)
        if not all(re.fullmatch(_NUM, n, re.ASCII) for n in numbers) or (step and not re.fullmatch(_NUM, step, re.ASCII)):
            raise OutputError(f"unrecognised array range {spec[:60]!r}")
        first, last, stride = int(low), int(high or low), int(step or 1)
        if last < first or stride == 0 or last >= MAX_ARRAY_TASKS:
            raise OutputError(f"unrecognised array range {spec[:60]!r}")
        yield first, last, stride


def count_tasks(spec: str) -> int:
    total = sum((last - first) // stride + 1 for first, last, stride in _spans(spec))
    if total > MAX_ARRAY_TASKS:
        raise OutputError(f"array range {spec[:60]!r} names more than {MAX_ARRAY_TASKS:,} tasks")
    return total


def expand_tasks(spec: str) -> list[int]:
    """`[2-9%2]` -> 2..9; `[1,3,5-7]` -> 1,3,5,6,7. The `%N` throttle is not a task."""
    count_tasks(spec)
    tasks: list[int] = []
    for first, last, stride in _spans(spec):
        tasks.extend(range(first, last + 1, stride))
    return tasks


def _reason(text: str) -> Optional[str]:
    if text == "None":
        return None
    text = text.strip()
    return None if text in ("", "None", "(null)") else text
