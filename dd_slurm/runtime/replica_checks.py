"""Readiness checks of many replicas at once: health probes side by side (threads, each waiting
on its own socket), and the on-node listener identity check of every newly healthy replica in one
step over their leader nodes, instead of one step per replica one after another."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from typing import Any, Optional, TypeVar

from dd_slurm.runtime.placement import Placed
from dd_slurm.runtime.replicas import identity_request
from dd_slurm.runtime.steps import StepSpec

PROBE_THREADS = 32  # probes and /v1/models requests in flight at once
T = TypeVar("T")
R = TypeVar("R")


def each(pool: Executor, action: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """`action` of every item, side by side in `pool` (in this thread when there is only one)."""
    items = list(items)
    if len(items) <= 1:
        return [action(item) for item in items]
    return list(pool.map(action, items))


def identity_requests(units: list[Placed], ports: dict[str, int], records: dict[str, Any],
                      leaders: dict[str, StepSpec]) -> dict[str, dict[str, dict[str, int]]]:
    """The batch request: leader node -> replica name -> what its listener must belong to
    (replicas.identity_request; ValueError names the step whose record is not valid)."""
    nodes: dict[str, dict[str, dict[str, int]]] = {}
    for unit in units:
        leader = leaders[unit.name]
        try:
            request = identity_request(records[unit.name], leader, ports[unit.name])
        except ValueError as err:
            raise ValueError(f"{leader.name}: its step record is not valid: {err}") from None
        nodes.setdefault(unit.leader, {})[unit.name] = request
    return nodes


def identity_problem(unit: Placed, answers: dict[str, dict], problem: Optional[str]) -> Optional[str]:
    """Why the unit's listener is not proven ours by the batch's answers, or None when it is."""
    answer = answers.get(unit.leader)
    check = (answer.get("checks") or {}).get(unit.name) if isinstance(answer, dict) else None
    if not isinstance(check, dict):
        return f"the check did not answer ({problem})"
    if not check.get("ours"):
        return str(check.get("detail"))
    return None
