"""The only caller of sbatch, squeue, sacct, scancel and scontrol: argv, no shell, typed errors.

Each call has a timeout and a minimal environment (PATH, LC_ALL=C, SLURM_CONF when set).
Transient controller errors are retried with bounded backoff; `Invalid job id specified` from
squeue means "not in the queue". One squeue and at most one sacct call per observation round,
chunked only when the id list would exceed what one argument may hold.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple, Optional

from dd_slurm.clock import Clock, slurm_time
from dd_slurm.errors import (
    InvalidInput,
    OutputError,
    SchedulerError,
    SubmissionUnknown,
    ToolFailed,
    ToolMissing,
    ToolTimeout,
    Transient,
)
from dd_slurm.scheduler import parse

TOOLS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "srun")
# How far the login node's clock may trail slurmctld's and slurmdbd's when it asks for jobs "since".
CLOCK_SKEW_S = 60.0
MAX_ARG_CHARS = 100_000  # Linux caps one argument at 128 KiB (MAX_ARG_STRLEN)
_TRANSIENT = re.compile(
    r"Socket timed out|Unable to contact slurm controller|Zero Bytes were transmitted|"
    r"Resource temporarily unavailable|temporarily unable to accept job|Connection refused|Connection reset|"
    r"Connection timed out|Broken pipe|Transport endpoint|"
    r"slurm_load_jobs error: (?!Invalid job id)",
    re.IGNORECASE,
)
_INVALID_ID = "Invalid job id specified"
_ALREADY_GONE = re.compile(r"already completing or completed|Invalid job id specified|Job/step already")


_CANCEL_ID = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,7})?(?:\.[0-9A-Za-z]{1,20})?\Z", re.ASCII)
_SIGNAL = re.compile(r"[A-Z0-9]{1,10}\Z", re.ASCII)


class Submission(NamedTuple):
    """What sbatch created: the job id; `adopted` when it was found by name after an ambiguous
    answer, with any duplicates of that name cancelled and named in `note`; the cluster it went to."""

    job_id: str
    adopted: bool = False
    duplicates: tuple[str, ...] = ()
    note: str = ""
    cluster: Optional[dict[str, Optional[str]]] = None

    def record_fields(self, submitted_at: float) -> dict:
        """What the attempt (or run) record keeps of it."""
        fields: dict = {"job_id": self.job_id, "submitted_at": submitted_at, "cluster": self.cluster}
        if self.adopted:
            fields["submission"] = {"adopted": True, "duplicates_cancelled": list(self.duplicates), "note": self.note}
        return fields

    def answer(self, attempt_dir: str, **more: object) -> dict:
        """`submit`'s answer: the attempt (or run) dir, the job id, and the note when there is one."""
        return {"attempt_dir": attempt_dir, "job_id": self.job_id, **more, **({"note": self.note} if self.note else {})}


class ToolResult(NamedTuple):
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class QueryResult(NamedTuple):
    squeue: list[parse.Row]
    sacct: Optional[list[parse.Row]]
    sacct_error: Optional[str]
    calls: int


def tool_env(environ: Mapping[str, str], bin_dir: Optional[str]) -> dict[str, str]:
    path = ":".join(p for p in (bin_dir, "/usr/local/bin", "/usr/bin", "/bin") if p)
    env = {"PATH": path, "LC_ALL": "C"}
    if environ.get("SLURM_CONF"):
        env["SLURM_CONF"] = environ["SLURM_CONF"]
    return env


def id_chunks(job_ids: Iterable[str], limit: int = MAX_ARG_CHARS) -> list[str]:
    """Comma-joined id lists, each under `limit` characters. Array tasks collapse to their job."""
    parents = list(dict.fromkeys(i.split("_")[0].split("+")[0] for i in job_ids))
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for job in parents:
        if current and size + len(job) + 1 > limit:
            chunks.append(",".join(current))
            current, size = [], 0
        current.append(job)
        size += len(job) + 1
    if current:
        chunks.append(",".join(current))
    return chunks


class SlurmCommands:
    def __init__(self, clock: Clock, bin_dir: Optional[str] = None, environ: Mapping[str, str] | None = None,
                 timeout_s: float = 30.0, attempts: int = 3, backoff_s: float = 0.5) -> None:
        self.clock = clock
        self.bin_dir = bin_dir
        self.env = tool_env(environ or {}, bin_dir)
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s

    @classmethod
    def from_environ(cls, clock: Clock, environ: Mapping[str, str] = os.environ, **kwargs: object) -> SlurmCommands:
        return cls(clock, environ.get("DD_SLURM_BIN_DIR") or None, environ, **kwargs)  # type: ignore[arg-type]

    def executable(self, tool: str) -> str:
        if self.bin_dir:
            return str(Path(self.bin_dir) / tool)
        for directory in self.env["PATH"].split(":"):
            candidate = Path(directory) / tool
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        raise ToolMissing(f"{tool}: not found on PATH (set DD_SLURM_BIN_DIR)")

    def run_once(self, tool: str, args: list[str], extra_env: Mapping[str, str] | None = None,
                 timeout_s: Optional[float] = None) -> ToolResult:
        argv = (self.executable(tool), *args)
        timeout_s = timeout_s or self.timeout_s
        try:
            done = subprocess.run(argv, capture_output=True, text=True, env={**self.env, **(extra_env or {})},
                                  timeout=timeout_s,
                                  stdin=subprocess.DEVNULL, errors="replace")
        except FileNotFoundError:
            raise ToolMissing(f"{tool}: {argv[0]} does not exist (check DD_SLURM_BIN_DIR)") from None
        except PermissionError:
            raise ToolMissing(f"{tool}: {argv[0]} is not executable") from None
        except subprocess.TimeoutExpired:
            raise ToolTimeout(f"{tool}: no answer within {timeout_s:g}s") from None
        return ToolResult(argv, done.returncode, done.stdout, done.stderr)

    def run(self, tool: str, args: list[str], ok_if: Optional[str] = None,
            extra_env: Mapping[str, str] | None = None) -> ToolResult:
        """Run with bounded retries of transient failures; non-zero exit raises ToolFailed."""
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            result = self.run_once(tool, args, extra_env)
            if result.returncode == 0 or (ok_if and ok_if in result.stderr):
                return result
            message = f"{tool} exited {result.returncode}: {_one_line(result.stderr) or '(no stderr)'}"
            if not _TRANSIENT.search(result.stderr):
                raise ToolFailed(message)
            if attempt == self.attempts:
                raise Transient(message)
            self.clock.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def submit(self, script: Path, job_name: str, forward: Mapping[str, str] | None = None,
               since: Optional[float] = None) -> Submission:
        """sbatch --parsable (with the plan's forwarded variables, nothing else of ours). sbatch is
        never rerun before the unique job name has been looked up in squeue and sacct: an
        ambiguous answer (a transport error, a timeout, unreadable output) may hide a job that
        exists. Found: adopted (the first; any others are cancelled and named). Then the cluster
        it went to (`cluster`), for every later question about the job."""
        return self._submit(script, job_name, forward, since)._replace(cluster=self.cluster())

    def _submit(self, script: Path, job_name: str, forward: Mapping[str, str] | None,
                since: Optional[float]) -> Submission:
        since = self.clock.wall() if since is None else since
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            job_id, problem, kind = self._sbatch_once(script, forward)
            if job_id:
                return Submission(job_id)
            found = self.find_by_name(job_name, since, problem)
            if found:
                return self._adopt(found, problem)
            if attempt == self.attempts:
                raise kind(f"{problem}; no job named {job_name} exists in squeue or sacct, so nothing was submitted")
            self.clock.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _sbatch_once(self, script: Path, forward: Mapping[str, str] | None) -> tuple[Optional[str], str, type]:
        """(job id, "", _) or (None, what was ambiguous, its error type); a refusal raises ToolFailed."""
        try:
            result = self.run_once("sbatch", ["--parsable", str(script)], extra_env=forward)
        except ToolTimeout as err:
            return None, str(err), ToolTimeout
        if result.returncode != 0:
            message = f"sbatch exited {result.returncode}: {_one_line(result.stderr) or '(no stderr)'}"
            if not _TRANSIENT.search(result.stderr):
                raise ToolFailed(message)
            return None, message, Transient
        try:
            return parse.parse_sbatch(result.stdout), "", Transient
        except OutputError as err:
            return None, str(err), OutputError

    def find_by_name(self, job_name: str, since: float, why: str = "") -> list[str]:
        """Job ids (array jobs by their array id) carrying this name: squeue --states=all, then
        sacct since `since` (a short job may already have left the queue). Either failing means
        the answer is unknown: SchedulerError, and nothing is resubmitted."""
        try:
            out = self.run("squeue", ["--noheader", "--states=all", f"--name={job_name}", "--format=%F"]).stdout
            found = {line.strip() for line in out.splitlines() if parse.is_job_number(line.strip())}
            start = slurm_time(since - CLOCK_SKEW_S)
            out = self.run("sacct", ["--noheader", "--parsable2", "--allocations", f"--name={job_name}",
                                     f"--starttime={start}", "--format=JobID"]).stdout
        except SchedulerError as err:
            raise SubmissionUnknown(f"{why}; and whether job {job_name} exists is unknown ({err}): not "
                                    f"resubmitted; check squeue/sacct --name={job_name}") from None
        for line in out.splitlines():
            token = line.strip().split("_")[0].split("+")[0].split(".")[0]
            if parse.is_job_number(token):
                found.add(token)
        return sorted(found, key=int)

    def _adopt(self, found: list[str], why: str) -> Submission:
        note = f"sbatch's answer was ambiguous ({why}); adopted job {found[0]} found by its unique name"
        for extra in found[1:]:
            self.cancel(extra)
        if found[1:]:
            note += f"; cancelled duplicate job(s) {', '.join(found[1:])}"
        return Submission(found[0], adopted=True, duplicates=tuple(found[1:]), note=note)

    def reached_time_limit(self, job_id: str) -> bool:
        """Whether Slurm is ending the job at its time limit: squeue's reason is `TimeLimit` from
        the moment it sends that SIGTERM (Slurm 22.05 has no SLURM_JOB_END_TIME to compare with).
        One quick call, no retries: any failure answers False."""
        if not _CANCEL_ID.match(job_id):
            return False
        try:
            result = self.run_once("squeue", ["--noheader", f"--jobs={job_id}", "--format=%r"], timeout_s=3.0)
        except SchedulerError:
            return False
        return result.returncode == 0 and result.stdout.strip() == "TimeLimit"

    def query(self, job_ids: list[str], submitted_since: Optional[float] = None) -> QueryResult:
        """One squeue, then one sacct unless squeue already shows every requested job live (sacct
        cannot change that answer). An squeue failure raises; a sacct failure is reported (lag).
        `submitted_since`, the earliest of these submissions (clock time), keeps sacct to jobs
        alive since a minute before it: a job id Slurm hands out again (after slurmctld lost its
        state, or past MaxJobId) then brings no accounting rows of the older job that had it."""
        from dd_slurm.scheduler.observe import all_live

        chunks = id_chunks(job_ids)
        squeue = [row for chunk in chunks for row in parse.parse_squeue(self.squeue_text(chunk), raw_ids=True)]
        if all_live(job_ids, squeue):
            return QueryResult(squeue, [], None, calls=len(chunks))
        since = [] if submitted_since is None else [f"--starttime={slurm_time(submitted_since - CLOCK_SKEW_S)}"]
        sacct, error = self._sacct_rows(chunks, since)
        return QueryResult(squeue, sacct, error, calls=len(chunks) * 2)

    def _sacct_rows(self, chunks: list[str], since: list[str]) -> tuple[Optional[list[parse.Row]], Optional[str]]:
        rows: list[parse.Row] = []
        for chunk in chunks:
            try:
                text = self.run("sacct", ["--noheader", "--parsable2", f"--jobs={chunk}", *since,
                                          f"--format={parse.SACCT_FIELDS}"]).stdout
            except SchedulerError as err:
                return None, str(err)
            rows += parse.parse_sacct(text, raw_ids=True)
        return rows, None

    def squeue_text(self, chunk: str) -> str:
        args = ["--noheader", "--states=all", f"--jobs={chunk}", f"--format={parse.SQUEUE_FORMAT}"]
        result = self.run("squeue", args, ok_if=_INVALID_ID)
        return "" if result.returncode != 0 else result.stdout

    def cancel(self, job_id: str, signal: Optional[str] = None, batch_only: bool = False) -> None:
        """scancel; a job or step that already ended is not an error. Only a job, task or step id
        is ever passed (never an option, such as `--all`, read from a damaged record)."""
        if not _CANCEL_ID.match(job_id) or (signal is not None and not _SIGNAL.match(signal)):
            raise InvalidInput(f"scancel: refusing job id {job_id[:40]!r} / signal {signal!r}")
        args = [f"--signal={signal}"] if signal else []
        result = self.run_once("scancel", args + (["--batch"] if batch_only else []) + [job_id])
        if result.returncode != 0 and not _ALREADY_GONE.search(result.stderr):
            self.run("scancel", args + (["--batch"] if batch_only else []) + [job_id])

    def signal_steps(self, step_ids: list[str], signal: str) -> None:
        """One `scancel --signal=SIGNAL` for several steps (cleanup stops a phase's steps at once);
        a step that already ended is not an error (scancel is silent about it, or says so). One
        try only: a step is never sent the same signal twice."""
        if not step_ids or not all(_CANCEL_ID.match(i) for i in step_ids) or not _SIGNAL.match(signal):
            raise InvalidInput(f"scancel: refusing step ids {[i[:40] for i in step_ids[:3]]} / signal {signal!r}")
        result = self.run_once("scancel", [f"--signal={signal}", *step_ids])
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        if result.returncode != 0 and not (errors and all(_ALREADY_GONE.search(line) for line in errors)):
            raise ToolFailed(f"scancel exited {result.returncode}: {_one_line(result.stderr) or '(no stderr)'}")

    def show(self, kind: str, *names: str) -> str:
        """`scontrol show job -o ID` / `scontrol show config`: the raw text (parsed by its user)."""
        return self.run("scontrol", ["show", kind, *(["-o", *names] if names else [])]).stdout

    def cluster(self) -> dict[str, Optional[str]]:
        """The cluster these tools reach, as the attempt record keeps it: ClusterName (None when
        `scontrol show config` fails or names none), the tools' directory, SLURM_CONF when set."""
        try:
            name = parse.parse_cluster_name(self.show("config"))
        except SchedulerError:
            name = None
        return {"name": name, "bin_dir": str(Path(self.executable("sbatch")).parent),
                "slurm_conf": self.env.get("SLURM_CONF")}

    def for_cluster(self, cluster: Optional[Mapping[str, Optional[str]]]) -> SlurmCommands:
        """This client, or one for the cluster an attempt was submitted to (its recorded tools and
        SLURM_CONF) when that is another: an attempt is asked about where it runs."""
        if not cluster or not cluster.get("bin_dir") or (
                cluster["bin_dir"] == self.bin_dir and cluster.get("slurm_conf") == self.env.get("SLURM_CONF")):
            return self
        conf = cluster.get("slurm_conf")
        return SlurmCommands(self.clock, cluster["bin_dir"], {"SLURM_CONF": conf} if conf else {},
                             timeout_s=self.timeout_s, attempts=self.attempts, backoff_s=self.backoff_s)

    def bounded(self, timeout_s: float) -> SlurmCommands:
        """The same client with one try of at most `timeout_s` per call (cleanup's budget)."""
        clone = SlurmCommands(self.clock, self.bin_dir, {}, timeout_s=max(timeout_s, 0.1), attempts=1)
        clone.env = dict(self.env)
        return clone

    def test_only(self, script: Path) -> ToolResult:
        return self.run("sbatch", ["--test-only", str(script)])

    def nodes(self) -> list:
        """Every node of every partition (hidden ones too) as sinfo has it configured (scheduler/sinfo.py)."""
        from dd_slurm.scheduler.sinfo import SINFO_FORMAT, parse_nodes

        return parse_nodes(self.run("sinfo", ["--all", "--noheader", "--Node", f"--format={SINFO_FORMAT}"]).stdout)


def _one_line(text: str) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines() if line.strip())[:500]
