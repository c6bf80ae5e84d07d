"""Slurm's job states mapped onto the contract's vocabulary. Unknown text is never guessed.

squeue and sacct print one word per job: the base state, or a state flag shown instead of it.
`EXPEDITING` (Slurm 25.11, expedited requeue) means the job is back in the queue, immediately
eligible with the highest priority: it will run again, so it is `pending`, like `REQUEUED`.
"""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """The contract's job states. Members are strings: `JobState.PENDING == "pending"`, and they
    print, format and serialize as their value."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETING = "completing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    OUT_OF_MEMORY = "out_of_memory"
    BOOT_FAIL = "boot_fail"
    DEADLINE = "deadline"
    ACCOUNTING_LAG = "accounting_lag"  # in neither squeue nor sacct, within the lag window
    LOST = "lost"  # in neither, past the window
    UNKNOWN = "unknown"  # a state word this table does not know

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)


STATE_MAP: dict[str, JobState] = {
    "PENDING": JobState.PENDING,
    "CONFIGURING": JobState.PENDING,
    "REQUEUED": JobState.PENDING,
    "EXPEDITING": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "POWER_UP_NODE": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "UPDATE_DB": JobState.RUNNING,
    "SUSPENDED": JobState.SUSPENDED,
    "STOPPED": JobState.SUSPENDED,
    "COMPLETING": JobState.COMPLETING,
    "STAGE_OUT": JobState.COMPLETING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "LAUNCH_FAILED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL,
    "PREEMPTED": JobState.PREEMPTED,
    "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
    "BOOT_FAIL": JobState.BOOT_FAIL,
    "DEADLINE": JobState.DEADLINE,
}
ABBREVIATIONS: dict[str, str] = {
    "PD": "PENDING", "CF": "CONFIGURING", "RQ": "REQUEUED", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD",
    "RD": "RESV_DEL_HOLD", "SE": "SPECIAL_EXIT", "R": "RUNNING", "RS": "RESIZING", "SI": "SIGNALING",
    "S": "SUSPENDED", "ST": "STOPPED", "CG": "COMPLETING", "SO": "STAGE_OUT", "CD": "COMPLETED",
    "F": "FAILED", "LF": "LAUNCH_FAILED", "CA": "CANCELLED", "RV": "REVOKED", "TO": "TIMEOUT",
    "NF": "NODE_FAIL", "PR": "PREEMPTED", "OOM": "OUT_OF_MEMORY", "BF": "BOOT_FAIL", "DL": "DEADLINE",
}
VOCABULARY: tuple[JobState, ...] = tuple(JobState)
TERMINAL: frozenset[JobState] = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT, JobState.NODE_FAIL,
     JobState.PREEMPTED, JobState.OUT_OF_MEMORY, JobState.BOOT_FAIL, JobState.DEADLINE, JobState.LOST}
)

# Slurm's reasons that say why a job ended (its FAIL_* reasons); any other reason a finished job
# still carries is the last one it waited for (`JobArrayTaskLimit`, `Priority`), and is not shown.
ENDING_REASONS: frozenset[str] = frozenset(
    {"NonZeroExitCode", "RaisedSignal", "TimeLimit", "NodeDown", "OutOfMemory", "JobLaunchFailure",
     "SystemFailure", "InactiveLimit", "DeadLine", "BadConstraints", "BurstBufferOperation",
     "InvalidAccount", "InvalidQOS"}
)


def normalize_state(raw: str) -> tuple[JobState, str | None]:
    """(contract state, detail) for Slurm's state text: `CANCELLED by 0` -> ("cancelled", "by 0")."""
    text = raw.strip().rstrip("+")
    word, _, rest = text.partition(" ")
    word = ABBREVIATIONS.get(word, word)
    return STATE_MAP.get(word, JobState.UNKNOWN), rest.strip() or None


def is_terminal(state: str) -> bool:
    return state in TERMINAL
