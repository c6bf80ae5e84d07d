"""Every reason an attempt can end with, declared once with the outcomes it can carry. The
README's "Failure kinds" table lists exactly these (tests/test_reasons.py holds the two equal).

Standard library only: the errors every module raises are built from this table.
"""

from __future__ import annotations

SUCCEEDED, FAILED, CANCELLED, TIMED_OUT = "succeeded", "failed", "cancelled", "timed_out"
OUTCOMES: tuple[str, ...] = (SUCCEEDED, FAILED, CANCELLED, TIMED_OUT)

# The triggers whose guard can answer False without raising (the machine's table guards them).
GUARDED_TRIGGERS = ("verify", "deploy", "mark_ready", "start_client", "finalize", "clean_up")

_FAILED_ONLY = (
    "bundle_checksum", "plan_digest", "plan_invalid", "gpu_shape", "hosts", "probe_failed", "placement",
    "paths", "not_in_allocation", "srun_missing", "executable_missing", "image_missing", "image_digest", "port_busy",
    "weights_missing", "weights_space", "weights_staging", "server_identity",
    "preflight_failed", "preflight_timeout", "launch_failed", "server_exited_while_loading", "server_crashed",
    "server_stalled", "replicas_below_min", "gateway_failed", "follower_exited", "client_failed", "client_timeout",
    "result_missing",
    "result_invalid", "result_too_few_records", "result_outside_results_dir", "sighup", "supervisor_restarted",
    "internal_error", *(f"{trigger}_guard_false" for trigger in GUARDED_TRIGGERS),
)

WEIGHTS_REASONS = ("weights_missing", "weights_space", "weights_staging")

REASONS: dict[str, frozenset[str]] = {
    "ok": frozenset({SUCCEEDED}),
    **{name: frozenset({FAILED}) for name in _FAILED_ONLY},
    "readiness_timeout": frozenset({TIMED_OUT}),
    "sigterm": frozenset({CANCELLED}),
    "sigint": frozenset({CANCELLED}),
    "pre_timeout_signal": frozenset({TIMED_OUT}),
    "time_limit": frozenset({TIMED_OUT}),
    # status's verdict when the supervisor is gone: the outcome comes from the job's state
    "supervisor_lost": frozenset({FAILED, CANCELLED, TIMED_OUT}),
    # ... and when the job ended before its supervisor ever ran (cancelled while pending)
    "never_started": frozenset({FAILED, CANCELLED, TIMED_OUT}),
}


def outcome_of(reason: str, outcome: str | None = None) -> str:
    """The outcome `reason` ends an attempt with: `outcome` when given and declared for it, else
    the reason's one declared outcome. An undeclared reason or outcome is a ValueError."""
    declared = REASONS.get(reason)
    if declared is None:
        raise ValueError(f"{reason!r} is not a declared failure reason (dd_slurm/reasons.py)")
    if outcome is None and len(declared) == 1:
        return next(iter(declared))
    if outcome not in declared:
        raise ValueError(f"reason {reason!r} ends an attempt {' or '.join(sorted(declared))}, not {outcome!r}")
    return outcome
