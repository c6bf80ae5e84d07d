"""`GET /metrics`: the gateway's accounting in Prometheus's text exposition format (0.0.4), with
conventional names: `_total` counters, `_seconds` histograms, gauges for what is in flight. The
key is required as for every other path. Standard library only (runs from the bundle)."""

from __future__ import annotations

from collections.abc import Iterable

from dd_slurm.gateway.pool import OUT_REASONS

PREFIX = "dd_slurm_gateway_"
LATENCY_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
FAMILIES = (  # name, type, help
    ("requests_total", "counter", "Requests admitted, by model alias."),
    ("responses_total", "counter", "Responses sent, by model alias and status class."),
    ("rejected_total", "counter", "Requests answered 429, by model alias and cause."),
    ("queue_length", "gauge", "Requests waiting for a replica, by model alias."),
    ("request_duration_seconds", "histogram", "Time from a request's arrival to its response's end, by model alias."),
    ("replica_requests_total", "counter", "Requests sent to each replica."),
    ("replica_responses_total", "counter", "Responses from each replica, by status class."),
    ("replica_inflight", "gauge", "Requests in flight at each replica."),
    ("replicas", "gauge", "Replicas of each model alias, by state."),
    ("replica_events_total", "counter", "Replicas taken out of rotation (ejected, stalled, lost) or back after a restart."),
    ("refused_draining_total", "counter", "Requests refused while the gateway drained at the attempt's stop."),
    ("replica_prompt_tokens_total", "counter", "Prompt tokens, by each replica's own /metrics (vLLM or SGLang)."),
    ("replica_generation_tokens_total", "counter", "Generated tokens, by each replica's own /metrics."),
    ("replica_server_requests", "gauge", "Requests running and waiting in each replica's engine, by its own /metrics."),
)


def _labels(**pairs: object) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs.items()) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def samples(pools: Iterable, refused_draining: int) -> dict[str, list[str]]:
    """Each family's sample lines from the pools' counters."""
    out: dict[str, list[str]] = {name: [] for name, _, _ in FAMILIES}
    for pool in pools:
        alias, stats = pool.alias, pool.stats
        out["requests_total"].append(f"{PREFIX}requests_total{_labels(alias=alias)} {stats.requests}")
        for cls, count in sorted(stats.responses.items()):
            out["responses_total"].append(f"{PREFIX}responses_total{_labels(alias=alias, status_class=cls)} {count}")
        for cause in ("queue_full", "queue_timeout"):
            out["rejected_total"].append(
                f"{PREFIX}rejected_total{_labels(alias=alias, cause=cause)} {stats.errors.get(cause, 0)}")
        out["queue_length"].append(f"{PREFIX}queue_length{_labels(alias=alias)} {len(pool.waiters)}")
        out["request_duration_seconds"] += _histogram(alias, stats.latency)
        for state in ("serving", *OUT_REASONS):
            count = sum(1 for r in pool.replicas if r.out == ("" if state == "serving" else state))
            out["replicas"].append(f"{PREFIX}replicas{_labels(alias=alias, state=state)} {count}")
        for event, count in pool.events.items():
            out["replica_events_total"].append(f"{PREFIX}replica_events_total{_labels(alias=alias, event=event)} {count}")
        for replica in pool.replicas:
            where = {"alias": alias, "deployment": replica.target.deployment, "replica": replica.target.replica}
            out["replica_requests_total"].append(f"{PREFIX}replica_requests_total{_labels(**where)} "
                                                 f"{replica.stats.requests}")
            for cls, count in sorted(replica.stats.responses.items()):
                out["replica_responses_total"].append(
                    f"{PREFIX}replica_responses_total{_labels(**where, status_class=cls)} {count}")
            out["replica_inflight"].append(f"{PREFIX}replica_inflight{_labels(**where)} {replica.inflight}")
            if replica.server is not None:
                out.update(_server(out, where, replica.server))
    out["refused_draining_total"].append(f"{PREFIX}refused_draining_total {refused_draining}")
    return out


def _server(out: dict[str, list[str]], where: dict, server: dict) -> dict[str, list[str]]:
    for ours, family in (("prompt_tokens", "replica_prompt_tokens_total"),
                         ("generation_tokens", "replica_generation_tokens_total")):
        out[family].append(f"{PREFIX}{family}{_labels(**where)} {_number(float(server.get(ours, 0.0)))}")
    for state in ("running", "waiting"):
        out["replica_server_requests"].append(
            f"{PREFIX}replica_server_requests{_labels(**where, state=state)} {_number(float(server.get(state, 0.0)))}")
    return out


def _histogram(alias: str, latency) -> list[str]:
    name = f"{PREFIX}request_duration_seconds"
    lines = [f"{name}_bucket{_labels(alias=alias, le=_number(bound))} {count}"
             for bound, count in zip(LATENCY_BOUNDS, latency.at_most(LATENCY_BOUNDS))]
    return lines + [f"{name}_bucket{_labels(alias=alias, le='+Inf')} {latency.count}",
                    f"{name}_sum{_labels(alias=alias)} {_number(latency.total)}",
                    f"{name}_count{_labels(alias=alias)} {latency.count}"]


def exposition(pools: Iterable, refused_draining: int = 0) -> bytes:
    """The whole text exposition: every family with its HELP and TYPE, then its samples."""
    found = samples(pools, refused_draining)
    lines = []
    for name, kind, text in FAMILIES:
        lines += [f"# HELP {PREFIX}{name} {text}", f"# TYPE {PREFIX}{name} {kind}", *found[name]]
    return ("\n".join(lines) + "\n").encode()
