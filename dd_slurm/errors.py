"""One error tree. The CLI maps each branch to an exit code (the README lists them)."""

from __future__ import annotations

from typing import Optional

from dd_slurm.reasons import outcome_of

EXIT_OK = 0
EXIT_INVALID = 2
EXIT_SCHEDULER = 3
EXIT_ATTEMPT_FAILED = 4


class DdSlurmError(Exception):
    """Base of every error dd-slurm raises on purpose; `str()` is the one-line message."""

    exit_code = 1


class InvalidInput(DdSlurmError):
    """Usage, plan or path errors: exit 2."""

    exit_code = EXIT_INVALID


class PlanError(InvalidInput):
    """A plan field is wrong; `path` names it (`deployments[1].port`)."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class AttemptDirError(InvalidInput):
    """An attempt directory is missing, unreadable or malformed."""


class RenderError(InvalidInput):
    """A value cannot be rendered safely into a batch script."""


class SchedulerError(DdSlurmError):
    """A Slurm command could not give an answer: exit 3."""

    exit_code = EXIT_SCHEDULER


class ToolMissing(SchedulerError):
    """The Slurm executable does not exist."""


class ToolFailed(SchedulerError):
    """The command exited non-zero; stderr is in the message."""


class ToolTimeout(SchedulerError):
    """The command did not finish within its timeout."""


class Transient(ToolFailed):
    """The controller could not be reached; worth a bounded retry."""


class SubmissionUnknown(SchedulerError):
    """sbatch's answer was ambiguous and the name lookup could not say whether a job exists."""


class OutputError(SchedulerError):
    """The command's output could not be parsed; the message names the line."""


class MachineError(DdSlurmError):
    """A trigger that the attempt state machine does not allow in its current state."""


class AttemptFailure(DdSlurmError):
    """An action failed: the attempt goes to cleanup with this outcome and reason code."""

    def __init__(self, reason: str, detail: str = "", outcome: Optional[str] = None) -> None:
        """`reason` must be declared in dd_slurm/reasons.py; `outcome` defaults to its declared one."""
        self.outcome = outcome_of(reason, outcome)
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class VerificationError(AttemptFailure):
    """A check before launch failed; `reason` is the check's code."""
