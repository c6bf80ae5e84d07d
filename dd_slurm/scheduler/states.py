"""Slurm's job states mapped onto the contract's vocabulary. Unknown text is never guessed.

squeue and sacct print one word per job: the base state, or a state flag shown instead of it.
`EXPEDITING` (Slurm 25.11, expedited requeue) means the job is back in the queue, immediately
eligible with the highest priority: it will run again, so it is `pending`, like `REQUEUED`.
"""

from __future__ import annotations

STATE_MAP: dict[str, str] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "EXPEDITING": "pending",
    "REQUEUE_FED": "pending",
    "REQUEUE_HOLD": "pending",
    "RESV_DEL_HOLD": "pending",
    "SPECIAL_EXIT": "pending",
    "POWER_UP_NODE": "pending",
    "RUNNING": "running",
    "RESIZING": "running",
    "SIGNALING": "running",
    "UPDATE_DB": "running",
    "SUSPENDED": "suspended",
    "STOPPED": "suspended",
    "COMPLETING": "completing",
    "STAGE_OUT": "completing",
    "COMPLETED": "completed",
    "FAILED": "failed",
    "LAUNCH_FAILED": "failed",
    "CANCELLED": "cancelled",
    "REVOKED": "cancelled",
    "TIMEOUT": "timeout",
    "NODE_FAIL": "node_fail",
    "PREEMPTED": "preempted",
    "OUT_OF_MEMORY": "out_of_memory",
    "BOOT_FAIL": "boot_fail",
    "DEADLINE": "deadline",
}
ABBREVIATIONS: dict[str, str] = {
    "PD": "PENDING", "CF": "CONFIGURING", "RQ": "REQUEUED", "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD",
    "RD": "RESV_DEL_HOLD", "SE": "SPECIAL_EXIT", "R": "RUNNING", "RS": "RESIZING", "SI": "SIGNALING",
    "S": "SUSPENDED", "ST": "STOPPED", "CG": "COMPLETING", "SO": "STAGE_OUT", "CD": "COMPLETED",
    "F": "FAILED", "LF": "LAUNCH_FAILED", "CA": "CANCELLED", "RV": "REVOKED", "TO": "TIMEOUT",
    "NF": "NODE_FAIL", "PR": "PREEMPTED", "OOM": "OUT_OF_MEMORY", "BF": "BOOT_FAIL", "DL": "DEADLINE",
}
VOCABULARY = (
    "pending", "running", "suspended", "completing", "completed", "failed", "cancelled", "timeout",
    "node_fail", "preempted", "out_of_memory", "boot_fail", "deadline", "accounting_lag", "lost", "unknown",
)
TERMINAL = frozenset(
    {"completed", "failed", "cancelled", "timeout", "node_fail", "preempted", "out_of_memory", "boot_fail",
     "deadline", "lost"}
)


def normalize_state(raw: str) -> tuple[str, str | None]:
    """(contract state, detail) for Slurm's state text: `CANCELLED by 0` -> ("cancelled", "by 0")."""
    text = raw.strip().rstrip("+")
    word, _, rest = text.partition(" ")
    word = ABBREVIATIONS.get(word, word)
    return STATE_MAP.get(word, "unknown"), rest.strip() or None


def is_terminal(state: str) -> bool:
    return state in TERMINAL
