"""What a replica's leader step published about itself, read back and validated (pure): the
port its launcher chose or was given, and the process identity the on-node listener check needs."""

from __future__ import annotations

from typing import Any

from dd_slurm.runtime.step_specs import StepSpec

MIN_PORT, MAX_PORT = 1024, 65535


def _int(record: dict[str, Any], key: str, low: int, high: int) -> int:
    value = record.get(key)
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{key} {value!r} is not an integer in {low}..{high}")
    return value


def check_record(record: Any, spec: StepSpec) -> dict[str, Any]:
    """The step record is the launcher's for this very step, on its node."""
    if not isinstance(record, dict):
        raise ValueError("the step record is not a JSON object")
    if record.get("name") != spec.name or record.get("node") != spec.node:
        raise ValueError(f"the step record names {record.get('name')!r} on {record.get('node')!r}, "
                         f"not {spec.name} on {spec.node}")
    return record


def published_port(record: Any, spec: StepSpec) -> int:
    """The leader's port: the one its launcher chose (automatic ports) or the plan's."""
    port = _int(check_record(record, spec), "port", MIN_PORT, MAX_PORT)
    if not spec.choose_port and str(port) != spec.values.get("port"):
        raise ValueError(f"port {port} is not the planned port {spec.values.get('port')}")
    return port


def exit_reason(record: Any, spec: StepSpec, ready: bool) -> str:
    """Why a deployment step's exit fails the attempt, from its launcher's record (None: it never ran)."""
    if record is None:
        return "launch_failed"
    if record.get("error"):
        return record.get("error_kind") or "launch_failed"
    if spec.rank > 0:
        return "follower_exited"
    return "server_crashed" if ready else "server_exited_while_loading"


def identity_request(record: Any, spec: StepSpec, port: int) -> dict[str, int]:
    """What the on-node check compares listeners against: the launched process (pid, start time)
    and its process group."""
    record = check_record(record, spec)
    return {"port": port, "pid": _int(record, "pid", 2, 2**22), "start_time": _int(record, "start_time", 0, 2**63),
            "pgid": _int(record, "pgid", 2, 2**22)}
