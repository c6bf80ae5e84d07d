"""Scriptable actions for driving the attempt machine without a runtime."""

from __future__ import annotations

from dd_slurm.errors import AttemptFailure
from dd_slurm.machine.table import ACTION_NAMES


class ScriptedActions:
    """Each action does what `script[name]` says: "ok", "false" (guard declines), "raise" (a
    declared failure) or "bug" (an exception no action means to raise)."""

    def __init__(self, script: dict[str, str] | None = None) -> None:
        self.script = dict(script or {})
        self.calls: list[str] = []

    def _do(self, name: str) -> bool:
        self.calls.append(name)
        behaviour = self.script.get(name, "ok")
        if behaviour == "raise":
            raise AttemptFailure("internal_error", name)  # a declared reason; the detail names the action
        if behaviour == "bug":
            raise AttributeError(f"module 'http' has no attribute 'client' (in {name})")
        return behaviour != "false"

    def __getattr__(self, name: str):
        if name not in ACTION_NAMES:
            raise AttributeError(name)
        return lambda *args: self._do(name)
