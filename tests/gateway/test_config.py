"""The gateway config file: what the runtime writes is what the gateway reads; bad files fail clearly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.gateway.config import ConfigError, GatewayConfig, ReplicaTarget, dump, for_attempt, load
from tests.gateway.backends import ROOT

pytestmark = pytest.mark.timeout(60)

GOOD = GatewayConfig(aliases={"m": (ReplicaTarget("d", 0, "http://10.0.0.1:8000/v1", 2),
                                    ReplicaTarget("d", 1, "http://10.0.0.1:8001", 256))},
                     state_path="/a/gateway-state.json", stats_path="/a/gateway-stats.json", queue_limit=4,
                     queue_timeout_s=1.5, stall_timeout_s=None, api_key_var="DD_KEY")


def test_dump_then_load_is_the_same_config() -> None:
    """The JSON the runtime writes reads back to an equal config."""
    assert GOOD == load(dump(GOOD).decode())


@pytest.mark.parametrize(("change", "message"), [
    ({"extra": 1}, "extra: unknown key"),
    ({"schema": 2}, "schema: must be 1"),
    ({"queue_limit": -1}, "queue_limit: must be an integer >= 0"),
    ({"queue_timeout_s": 0}, "queue_timeout_s: must be a finite number > 0"),
    ({"stall_timeout_s": "300"}, "stall_timeout_s: must be a finite number > 0"),
    ({"api_key_var": "1BAD"}, "api_key_var: must be an environment variable name or null"),
    ({"listen": {"host": "127.0.0.1", "port": 70000}}, "listen.port: must be an integer >= 0 and <= 65535"),
    ({"aliases": {}}, "aliases: must be a non-empty object"),
    ({"aliases": {"m": {"replicas": [{"deployment": "d", "replica": 0, "base_url": "https://h:1"}]}}},
     "aliases.m.replicas[0].base_url: must be http://HOST:PORT or http://HOST:PORT/v1"),
    ({"aliases": {"m": {"replicas": [{"deployment": "d", "replica": 0, "base_url": "http://h:1",
                                      "max_inflight": 0}]}}},
     "aliases.m.replicas[0].max_inflight: must be an integer >= 1"),
    ({"aliases": {"m": {"replicas": [{"deployment": "d", "replica": 0}]}}},
     "aliases.m.replicas[0].base_url: required key is missing"),
    ({"aliases": {"m": {"replicas": [{"deployment": "../d", "replica": 0, "base_url": "http://h:1"}]}}},
     "aliases.m.replicas[0].deployment: must be an identifier"),
    ({"aliases": {"m": {"replicas": []}}}, "aliases.m.replicas: must be a non-empty list"),
    ({"aliases": {"m": {"replicas": ["x"]}}}, "aliases.m.replicas[0]: must be an object"),
    ({"aliases": {"m n": {"replicas": []}}}, "aliases.m n: not an identifier"),
    ({"listen": 80}, "listen: must be an object"),
    ({"state_path": ""}, "state_path: must be a non-empty string without control characters"),
])
def test_bad_fields_are_named(change, message) -> None:
    """Each wrong field is reported by its path."""
    data = {**json.loads(dump(GOOD)), **change}
    with pytest.raises(ConfigError) as err:
        load(json.dumps(data))
    assert message == str(err.value)


@settings(max_examples=40, deadline=None)
@given(queue_limit=st.integers(0, 10**6), stall=st.none() | st.floats(0.001, 1e6), port=st.integers(0, 65535),
       key=st.none() | st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True),
       caps=st.lists(st.integers(1, 4096), min_size=1, max_size=4))
def test_any_valid_config_reads_back_equal(queue_limit, stall, port, key, caps) -> None:
    """Whatever settings and replicas the runtime writes, the gateway reads the same config."""
    config = GatewayConfig(aliases={"m": tuple(ReplicaTarget("d", k, f"http://h:{8000 + k}/v1", cap)
                                               for k, cap in enumerate(caps))},
                           state_path="/a/s.json", stats_path="/a/t.json", port=port, queue_limit=queue_limit,
                           stall_timeout_s=stall, api_key_var=key)
    assert config == load(dump(config).decode())


def test_bad_config_file_is_one_error_line_and_exit_2(tmp_path) -> None:
    """The entry point answers a bad file with exit 2 and one `error:` line, no traceback."""
    path = tmp_path / "gateway.json"
    path.write_text('{"schema": 1, "listen": NaN}')
    done = subprocess.run([sys.executable, "-m", "dd_slurm.gateway", str(path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=30)
    assert (2, 1, True) == (done.returncode, len(done.stderr.splitlines()), done.stderr.startswith(f"error: {path}: "))


def test_for_attempt_builds_from_the_endpoint_replicas_and_the_plan_settings() -> None:
    """The runtime's helper: endpoints.json replicas + per-deployment caps + the plan's gateway
    object give the config, with the state and stats files in the attempt dir."""
    class PlanGateway:
        queue_limit, queue_timeout_s, stall_timeout_s = 4, 2, None
        header_timeout_s, idle_timeout_s, max_connections, eject_after = 3, 7, 9, 5

    models = {"m": [{"deployment": "d", "replica": 0, "base_url": "http://10.0.0.1:8000/v1"},
                    {"deployment": "d", "replica": 1, "base_url": "http://10.0.0.1:8001/v1"}]}
    config = for_attempt("/ws/a", models, {"d": 2}, PlanGateway(), "DD_KEY", expendable=frozenset({"d"}))
    assert (config.aliases["m"][1], config.state_path, config.stats_path, config.queue_limit, config.stall_timeout_s,
            config.api_key_var) == (ReplicaTarget("d", 1, "http://10.0.0.1:8001/v1", 2, True), "/ws/a/gateway-state.json",
                                    "/ws/a/gateway-stats.json", 4, None, "DD_KEY")
    assert (3.0, 7.0, 9, 5, "/ws/a/gateway-routes.json", True) == (
        config.header_timeout_s, config.idle_timeout_s, config.max_connections, config.eject_after, config.routes_path,
        config.replica_metrics)
    assert config == load(dump(config).decode())
    assert (1024, 30.0, 300.0) == (lambda c: (c.queue_limit, c.queue_timeout_s, c.stall_timeout_s))(
        for_attempt("/ws/a", models, {}))
