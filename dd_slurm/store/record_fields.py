"""Field checks and shapes shared by the attempt record and the run record, free of attrs and
cattrs: the run record's converter registers these same hooks, and the attempt record is checked
through these shapes (store/shapes), so both read a value alike."""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from dd_slurm.plan.fields import IDENTIFIER, FieldError, check_text
from dd_slurm.store.shapes import REQUIRED, free_text, items, optional, record, scalar

JOB_ID = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,7})?\Z", re.ASCII)


def job_id(value: Any, _type: Any = None) -> Optional[str]:
    if value is not None and type(value) is not str:
        raise FieldError("must be a string")
    if value is not None and not JOB_ID.match(value):
        raise FieldError(f"{value[:40]!r} is not a Slurm job id")
    return value


def wall_time(value: Any, _type: Any = None) -> Optional[float]:
    """A wall-clock time or a duration: a finite number (JSON's NaN and Infinity are not)."""
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value):
        raise FieldError("must be a finite number")
    return float(value)


def positive(value: Any, _type: Any = None) -> Optional[float]:
    number = wall_time(value)
    if number is not None and number <= 0:
        raise FieldError("must be positive")
    return number


def state_word(value: Any, _type: Any = None) -> str:
    """A job state word (a scheduler JobState member, a str, or its value read back), as plain
    text; the vocabulary is not checked here: a settled `status` does not import the scheduler."""
    if not isinstance(value, str):
        raise FieldError("must be a string")
    check_text(value)
    return str(value)


def optional_text(value: Any, _type: Any = None) -> Optional[str]:
    return None if value is None else free_text(value)


def cluster_name(value: Any, _type: Any = None) -> Optional[str]:
    if value is not None and (type(value) is not str or not IDENTIFIER.match(value)):
        raise FieldError("must be a Slurm cluster name")
    return value


def absolute_path(value: Any, _type: Any = None) -> Optional[str]:
    """A path read back and then used to run the Slurm tools: absolute, with no control characters."""
    if value is None:
        return None
    if type(value) is not str or not value.startswith("/"):
        raise FieldError("must be an absolute path")
    check_text(value)
    return value


TEXT, FLOAT, INT, BOOL = scalar(str), scalar(float), scalar(int), scalar(bool)
CANCEL_REQUEST = record([("time", FLOAT, REQUIRED), ("via", optional(TEXT), None)], omit_if_default=("via",))
CLUSTER = record([("name", cluster_name, REQUIRED), ("bin_dir", absolute_path, REQUIRED),
                  ("slurm_conf", absolute_path, None)])
SUBMISSION = record([("adopted", BOOL, REQUIRED), ("duplicates_cancelled", items(TEXT), REQUIRED),
                     ("note", free_text, REQUIRED)])
