"""The resolved plan through the one strict converter (plan/strict.py): `structure_plan`."""

from __future__ import annotations

from typing import Any

from dd_slurm.errors import PlanError
from dd_slurm.plan.records import Plan
from dd_slurm.plan.strict import CONVERTER, MISSING, did_you_mean, first_error, misspelt, with_value

__all__ = ("CONVERTER", "did_you_mean", "structure_plan")


def structure_plan(data: Any) -> Any:
    if not isinstance(data, dict):
        raise PlanError("", "the plan must be a JSON object")
    try:
        return CONVERTER.structure(data, Plan)
    except Exception as err:
        path, reason = first_error(err, "")
        if reason == MISSING:
            path, reason = misspelt(data, path) or (path, reason)
        raise PlanError(path.lstrip("."), with_value(reason, path, data)) from None
