"""The attempt's gateway as one more step: its spec (started by the one step runner on the client's
node, loopback only, while the servers load), its config from the ready replicas (written once every
replica is ready: the gateway waits for it, listening nowhere until then), the URL it serves read
back validated from its state file, and what its exit means for the attempt. The gateway's config
module is imported when first needed (at `ready`), not at supervisor start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from dd_slurm.errors import AttemptFailure
from dd_slurm.gateway.__main__ import AWAIT_FLAG
from dd_slurm.plan.placement import Placed
from dd_slurm.plan.records import Plan
from dd_slurm.runtime.step_specs import DEFAULT_PATH, Layout, StepSpec
from dd_slurm.store import attempt_files as files
from dd_slurm.store.atomic import write_atomic

GATEWAY_STEP = "gateway"
START_TIMEOUT_S = 30.0
STALLED_EXIT = 75  # the gateway's exit when a replica stalled (its state file names the replica)


def _literal(text: str) -> str:
    """A fixed argv word: braces doubled, so placeholder expansion on the node leaves it as is."""
    return text.replace("{", "{{").replace("}", "}}")


def write_config(plan: Plan, placement: tuple[Placed, ...], urls: dict[str, str], attempt_dir: Path) -> Path:
    """gateway.json: every alias with the base URL and in-flight cap of each of its replicas. The
    key's value is not in it: the gateway reads it from the variable the client's key uses."""
    from dd_slurm.gateway.config import dump, for_attempt

    aliases = {d.name: d.model_alias for d in plan.deployments}
    models: dict[str, list[dict]] = {}
    for unit in placement:
        if unit.name in urls:  # a replica lost before its port was known has none
            models.setdefault(aliases[unit.deployment], []).append(
                {"deployment": unit.deployment, "replica": unit.replica, "base_url": urls[unit.name]})
    expendable = frozenset(d.name for d in plan.deployments if d.min_replicas is not None and d.min_replicas < d.replicas)
    config = for_attempt(str(attempt_dir), models, {d.name: d.max_inflight for d in plan.deployments},
                         plan.gateway, plan.client.env.api_key_var, expendable=expendable)
    path = attempt_dir / files.GATEWAY_CONFIG
    write_atomic(path, dump(config))
    return path


def withdraw_config(attempt_dir: Path) -> None:
    """No config before the gateway starts: the one it waits for is the one written at `ready`."""
    (attempt_dir / files.GATEWAY_CONFIG).unlink(missing_ok=True)


def gateway_spec(plan: Plan, node: str, layout: Layout, interpreter: list[str], entry: str,
                 config: Path) -> StepSpec:
    key_var = plan.client.env.api_key_var
    env = {"PATH": DEFAULT_PATH, "LC_ALL": "C.UTF-8", "DD_SLURM_ATTEMPT_ID": layout.attempt_id,
           "DD_SLURM_ROLE": GATEWAY_STEP, "DD_SLURM_ATTEMPT_DIR": layout.attempt_dir}
    argv = tuple(_literal(word) for word in (*interpreter, entry, "_gateway", AWAIT_FLAG, str(config)))
    return StepSpec(name=GATEWAY_STEP, node=node, argv=argv, values={}, env=env,
                    passed=(key_var,) if key_var else (), cpus=plan.job.cpus_per_task)


def served_base(attempt_dir: Path, started: Optional[dict]) -> Optional[str]:
    """`http://127.0.0.1:PORT` once the gateway this supervisor started says it serves; None
    before. A state file from another process, or of the wrong shape, is not believed."""
    try:
        state = json.loads((attempt_dir / files.GATEWAY_STATE).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(state, dict) and state.get("state") == "serving" and started and
            state.get("pid") == started.get("pid")):
        return None
    port, host = state.get("port"), state.get("host")
    if type(port) is not int or not 0 < port < 65536 or host != "127.0.0.1":
        raise AttemptFailure("gateway_failed", f"gateway state names {host!r}:{port!r}, not a loopback port")
    return f"http://127.0.0.1:{port}"


def exit_failure(attempt_dir: Path, code: int) -> AttemptFailure:
    """The gateway ended while the attempt needed it: a stalled replica, or the gateway itself."""
    if code == STALLED_EXIT:
        return AttemptFailure("server_stalled", _stalled_detail(attempt_dir))
    return AttemptFailure("gateway_failed", f"the gateway exited {code}; see logs/{GATEWAY_STEP}.log")


def state_of(attempt_dir: Path) -> dict:
    """The gateway's state file as written (`state`: serving, draining, drained, stopped,
    stalled); {} when there is none or it is not a JSON object. Callers trust only what they check."""
    try:
        state = json.loads((attempt_dir / files.GATEWAY_STATE).read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def check_not_stalled(attempt_dir: Path) -> None:
    """The gateway's state file says `stalled` (it found a stalled replica and is ending, its exit
    not yet seen): that is the attempt's failure, however the client ended."""
    if state_of(attempt_dir).get("state") == "stalled":
        raise AttemptFailure("server_stalled", _stalled_detail(attempt_dir))


def _stalled_detail(attempt_dir: Path) -> str:
    try:
        stalled = json.loads((attempt_dir / files.GATEWAY_STATE).read_text()).get("stalled") or []
        first = stalled[0]
        return (f"replica {first['name']} ({first['base_url']}) sent no response byte for {first['silent_s']:.0f}s "
                f"with {first['inflight']} request(s) in flight")
    except (OSError, ValueError, AttributeError, IndexError, KeyError, TypeError):
        return "a replica stalled (the gateway's state file does not say which)"
