"""Node-local weights, from the supervisor's side: one step with a task on every node that hosts a
staged deployment's replica (`_stage`, runtime/node/weights.py), started beside the node probe and
the client's preflight, and waited for before any server is released. Each node's answer is
checked before use and journaled (`weights_staged`: the node, the weights, its copy, bytes,
files, seconds, and whether an earlier copy was reused)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.runtime import verify, waits

if TYPE_CHECKING:
    from dd_slurm.plan.records import Deployment
    from dd_slurm.runtime.session import Session
    from dd_slurm.runtime.step_specs import StepSpec

STAGE_STEP = "stage-weights"
ANSWER_FIELDS: dict[str, Any] = {"source": str, "target": str, "reused": bool, "bytes": int, "files": int,
                                 "seconds": (int, float), "ended_at": (int, float)}


def mounts_copy(spec: StepSpec, dep: Deployment) -> bool:
    """A container step of a deployment whose weights are staged: pyxis mounts the node's copy at
    the step's start, so the step cannot be launched held before the copy exists."""
    return spec.container is not None and dep.weights is not None and dep.weights.stage == "node_local"


def launch(session: Session) -> None:
    """The staging step on every node that needs a copy; nothing when no deployment stages."""
    request = session.write_stage_request()
    if request is None:
        return
    nodes = tuple(session.weights_copies())
    session.gate.check()
    session.prepared.runner.start_on_nodes(nodes, ["_stage", str(request)], STAGE_STEP, role="stage")


def deadline_s(session: Session) -> float:
    """How long staging may take: the longest ready_timeout_s of the staged deployments."""
    return max(d.ready_timeout_s for d in session.prepared.plan.deployments
               if d.weights is not None and d.weights.stage == "node_local")


def await_copies(session: Session, started_at: float, alive: Callable[[], None],
                 event: Callable[..., None]) -> None:
    """Every node's copy in place (one `weights_staged` event each), or the first problem as the
    attempt's failure (weights_missing, weights_space, weights_staging)."""
    if STAGE_STEP not in session.table.procs:
        return
    deadline = started_at + deadline_s(session)
    waits.wait_exit(session, STAGE_STEP, deadline, alive)
    answers, problem = session.prepared.runner.node_answers(STAGE_STEP, session.clock.monotonic())
    for node in session.weights_copies():
        answer = answers.get(node)
        if isinstance(answer, dict) and answer.get("problem"):
            raise verify.weights_failure(answer["problem"], node)
        staged = checked_answer(answer)
        if staged is None:
            raise AttemptFailure("weights_staging", f"{node} did not report its copies"
                                 f"{f' ({problem})' if problem else ''}")
        for copy in staged:
            event("weights_staged", node=node, weights=copy["source"], copy=copy["target"], reused=copy["reused"],
                  bytes=copy["bytes"], files=copy["files"], seconds=copy["seconds"], ended_at=copy["ended_at"])


def checked_answer(answer: Any) -> Optional[list[dict[str, Any]]]:
    """A node's `staged` list when every entry has exactly the expected fields and types."""
    staged = answer.get("staged") if isinstance(answer, dict) else None
    if not isinstance(staged, list):
        return None
    for copy in staged:
        if not isinstance(copy, dict) or set(copy) != set(ANSWER_FIELDS):
            return None
        if any(not isinstance(copy[k], t) or (t is int and isinstance(copy[k], bool)) for k, t in ANSWER_FIELDS.items()):
            return None
    return staged
