"""The resolved plan v1: strict structure, field-path errors, control characters, digest."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import PlanError
from dd_slurm.plan import fields
from dd_slurm.plan.io import canonical_json, load_plan, parse_plan, plan_digest, plan_to_data
from tests.conftest import PLANS

VALID = sorted(PLANS.glob("*.json"))
INVALID = [
    tuple(line.split("\t"))
    for line in (PLANS / "invalid" / "expected.tsv").read_text().splitlines()
    if line and not line.startswith("#")
]
CONTROL_CHARS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture_plans_load(path: Path) -> None:
    """Every plan in fixtures/plans/ is valid and survives a canonical round trip unchanged."""
    plan = load_plan(path)
    assert plan == parse_plan(canonical_json(plan))


@pytest.mark.parametrize(("name", "expected"), INVALID, ids=[n for n, _ in INVALID])
def test_invalid_fixture_plans_give_their_documented_error(name: str, expected: str) -> None:
    """Each invalid plan gives exactly the one-line error recorded in invalid/expected.tsv."""
    with pytest.raises(PlanError) as caught:
        load_plan(PLANS / "invalid" / name)
    assert expected == f"error: {caught.value}"


def test_every_invalid_fixture_has_an_expected_error() -> None:
    """No invalid plan fixture lacks its documented error."""
    on_disk = sorted(p.name for p in (PLANS / "invalid").glob("*.json"))
    assert on_disk == sorted(name for name, _ in INVALID)


def test_digest_is_independent_of_key_order_and_whitespace() -> None:
    """The digest covers canonical JSON, so formatting of the file does not change it."""
    raw = json.loads((PLANS / "single-node.json").read_text())
    shuffled = json.dumps(dict(reversed(list(raw.items()))), indent=7)
    assert plan_digest(load_plan(PLANS / "single-node.json")) == plan_digest(parse_plan(shuffled))


def test_digest_changes_with_any_value() -> None:
    """Changing one value changes the digest."""
    raw = json.loads((PLANS / "single-node.json").read_text())
    before = plan_digest(parse_plan(json.dumps(raw)))
    raw["deployments"][0]["port"] += 1
    assert before != plan_digest(parse_plan(json.dumps(raw)))


def _string_paths(value, path=()):
    """Every (path, str) in a JSON tree, including dict keys under env.set."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _string_paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _string_paths(item, path + (index,))


def _set_at(tree, path, new):
    for step in path[:-1]:
        tree = tree[step]
    tree[path[-1]] = new


BASE = json.loads((PLANS / "two-deployments.json").read_text())
BASE_DATA = plan_to_data(parse_plan(json.dumps(BASE)))
STRING_FIELDS = list(_string_paths(BASE))


@given(
    field=st.sampled_from(STRING_FIELDS),
    bad=st.sampled_from(CONTROL_CHARS),
    prefix=st.text(alphabet="abc", max_size=3),
)
def test_any_control_character_in_any_string_field_is_rejected(field, bad, prefix) -> None:
    """A control character (C0, DEL, C1, U+2028/9) anywhere in any string field is a PlanError."""
    path, value = field
    data = json.loads(json.dumps(BASE))
    _set_at(data, path, prefix + bad + value)
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(data))
    expected = (_dotted(path), f"control character U+{ord(bad):04X} is not allowed")
    assert expected == (caught.value.path, caught.value.reason)


def _dotted(path) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else f".{step}"
    return text.lstrip(".")


@given(bad=st.sampled_from(CONTROL_CHARS))
def test_control_character_in_env_name_is_rejected(bad) -> None:
    """Environment variable names are strings too: a control character in one is rejected."""
    data = json.loads(json.dumps(BASE))
    data["client"]["env"]["set"] = {f"A{bad}B": "x"}
    with pytest.raises(PlanError):
        parse_plan(json.dumps(data))


@given(text=st.text(max_size=40))
def test_control_char_detector_matches_the_contract(text: str) -> None:
    """The detector flags exactly C0, DEL, C1 and U+2028/U+2029."""
    expected = any(c in CONTROL_CHARS for c in text)
    assert expected == (fields.control_char(text) is not None)


@given(st.lists(st.sampled_from(["{port}", "{{", "}}", "x", "-", "{host}", "{node_rank}"]), max_size=8))
def test_placeholders_expand_as_plain_text(parts: list[str]) -> None:
    """Placeholders expand to their values; doubled braces become single braces; nothing else changes."""
    text = "".join(parts)
    values = {"port": "8000", "host": "n1", "node_rank": "1"}
    expected = "".join({"{{": "{", "}}": "}"}.get(p, values.get(p[1:-1], p)) for p in parts)
    assert expected == fields.expand(text, values)


def test_unknown_field_at_any_depth_is_rejected() -> None:
    """Strictness holds in nested records: an extra key in client.result is named."""
    data = json.loads(json.dumps(BASE))
    data["client"]["result"]["compress"] = True
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(data))
    assert "client.result.compress: unknown key" == str(caught.value)


def test_plan_records_are_frozen() -> None:
    """Plans are values: assigning to a field raises."""
    plan = load_plan(PLANS / "single-node.json")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        plan.name = "other"  # type: ignore[misc]


def test_defaults_are_filled_into_the_canonical_form() -> None:
    """Optional keys left out get their defaults, so the digest covers the effective plan."""
    data = json.loads(json.dumps(BASE))
    del data["deployments"][1]["health_path"]
    assert "/health" == plan_to_data(parse_plan(json.dumps(data)))["deployments"][1]["health_path"]
    assert BASE_DATA == plan_to_data(parse_plan(json.dumps(BASE)))


NUMBER_FIELDS = [
    ("job", "nodes"), ("job", "pre_timeout_signal_s"), ("deployments", 0, "ready_timeout_s"),
    ("deployments", 1, "port"), ("client", "timeout_s"), ("runtime", "cleanup_grace_s"),
    ("runtime", "reconcile_deadline_s"), ("client", "result", "min_records"),
]


@given(field=st.sampled_from(NUMBER_FIELDS), literal=st.sampled_from(["NaN", "Infinity", "-Infinity", "1e309",
                                                                       "-1e400", "9" * 5000]))
def test_non_finite_and_overflowing_numbers_are_rejected_naming_the_field(field, literal) -> None:
    """NaN, Infinity, overflowing and absurdly long literals are errors at their field, never values."""
    data = json.loads(json.dumps(BASE))
    _set_at(data, field, "@@NUMBER@@")
    raw = json.dumps(data).replace('"@@NUMBER@@"', literal)
    with pytest.raises(PlanError) as caught:
        parse_plan(raw)
    assert (_dotted(field), True) == (caught.value.path, "not a finite number" in caught.value.reason)


OBJECT_PATHS = [(), ("job",), ("deployments", 0), ("deployments", 1), ("client", "result"), ("runtime",)]


@given(where=st.sampled_from(OBJECT_PATHS))
def test_a_duplicate_key_in_any_object_is_rejected_naming_the_object(where) -> None:
    """A key given twice (the second would silently win in plain JSON) is an error naming the key."""
    data = json.loads(json.dumps(BASE))
    target = data
    for step in where:
        target = target[step]
    key = next(iter(target))
    raw = json.dumps(data)
    marker = json.dumps({key: target[key]})[1:-1]
    tree = json.dumps(target)
    raw = raw.replace(tree, "{" + marker + ", " + tree[1:], 1)
    with pytest.raises(PlanError) as caught:
        parse_plan(raw)
    assert (_dotted(where), f"duplicate key {key!r}") == (caught.value.path, caught.value.reason)


NAME_FIELDS = [("name",), ("deployments", 0, "name"), ("deployments", 1, "model_alias"), ("job", "partition"),
               ("job", "account"), ("job", "comment"), ("job", "time_limit")]


@given(field=st.sampled_from(NAME_FIELDS), bad=st.sampled_from(["\u200b", "\u202e", "\u2066", "\ufeff", "\u00ad"]))
def test_format_characters_in_names_and_scheduler_fields_are_rejected(field, bad) -> None:
    """Invisible format characters (Cf: zero-width, bidi overrides) cannot hide in names or #SBATCH values."""
    data = json.loads(json.dumps(BASE))
    data["job"].setdefault("account", "acct")
    _set_at(data, field, "a" + bad + "b")
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(data))
    assert (_dotted(field), f"format character U+{ord(bad):04X} is not allowed") == \
        (caught.value.path, caught.value.reason)


@given(name=st.sampled_from(["SBATCH_PARTITION", "SLURM_CONF", "DD_SLURM_X", "LD_PRELOAD", "LD_LIBRARY_PATH",
                             "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"]),
       where=st.sampled_from([("client", "env"), ("deployments", 0, "env")]),
       key=st.sampled_from(["forward", "api_key_var"]))
def test_names_slurm_the_runtime_or_the_loader_read_cannot_be_passed_on(name, where, key) -> None:
    """A forwarded or key variable named SBATCH_*, SLURM_*, DD_SLURM_*, LD_* or PYTHON* is refused."""
    data = json.loads(json.dumps(BASE))
    target = data
    for step in where:
        target = target[step]
    target[key] = [name] if key == "forward" else name
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(data))
    suffix = "[0]" if key == "forward" else ""
    assert _dotted(where + (key,)) + suffix == caught.value.path


def test_new_keys_have_their_documented_defaults() -> None:
    """replicas 1, max_inflight 256, served_model null, auto port when absent, gateway 1024/30/300, no array."""
    data = json.loads(json.dumps(BASE))
    del data["deployments"][0]["port"]
    plan = parse_plan(json.dumps(data))
    dep = plan.deployments[0]
    expected = (1, 256, None, None, None, 1024, 30.0, 300.0, None, 1)
    assert expected == (dep.replicas, dep.max_inflight, dep.served_model, dep.port, dep.env.api_key_var,
                        plan.gateway.queue_limit, plan.gateway.queue_timeout_s, plan.gateway.stall_timeout_s,
                        plan.job.array, plan.job.shards)


def _objects(data, path=""):
    """(path, object) of every JSON object in `data`, the plan's own included."""
    if isinstance(data, dict):
        yield path, data
        for key, value in data.items():
            yield from _objects(value, f"{path}.{key}")
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _objects(value, f"{path}[{index}]")


@given(st.data())
def test_a_misspelt_key_is_named_with_the_key_it_meant(data) -> None:
    """Any key of any object in a valid plan, renamed by one typo (a letter dropped or doubled):
    the error names the misspelt key as unknown and the key it meant, never `required key is
    missing` for the key the user did type."""
    plan = json.loads((PLANS / "single-node.json").read_text())
    path, obj = data.draw(st.sampled_from([(p, o) for p, o in _objects(plan) if o and not p.endswith((".set",))]))
    key = data.draw(st.sampled_from(sorted(k for k in obj if len(k) >= 4)))
    at = data.draw(st.integers(1, len(key) - 1))
    typo = data.draw(st.sampled_from([key[:at] + key[at + 1:], key[:at] + key[at] + key[at:]]))
    obj[typo] = obj.pop(key)
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(plan))
    assert f"{path.lstrip('.') + '.' if path else ''}{typo}: unknown key (did you mean {key}?)" == str(
        caught.value)


@pytest.mark.parametrize(("argv", "warned"), [
    (["/usr/bin/vllm", "serve", "--download-dir", "$HF_HOME/x"], [(3, "$HF_HOME")]),
    (["/usr/bin/vllm", "serve", "${{MODEL}}", "--port", "{port}"], [(2, "${MODEL}")]),  # braces doubled, as they must be
    (["/usr/bin/vllm", "serve", "/models/m", "--price", "$5"], []),  # not a variable name
    (["/bin/bash", "-lc", "exec vllm serve $MODEL --port {port}"], []),  # the shell expands it
    (["/bin/sh", "-c", "exec x"], []),
    (["/usr/bin/env", "A=$B", "x"], [(1, "$B")]),  # env does not expand either
])
def test_a_shell_variable_in_argv_is_a_warning(argv: list[str], warned: list[tuple[int, str]]) -> None:
    """`$VAR`/`${VAR}` in an argument is passed as written (no shell runs the step): the plan is
    valid and each such argument gets one warning naming its field; a shell given `-c` expands it."""
    from dd_slurm.plan.checks import argv_warnings

    data = json.loads((PLANS / "single-node.json").read_text())
    data["deployments"][0]["argv"] = argv
    assert [f"warning: deployments[0].argv[{i}]: {var} is passed as written: no shell expands it (set the value in "
            "env.set or env.forward and let the program read it, or run the program through `bash -c`)"
            for i, var in warned] == argv_warnings(parse_plan(json.dumps(data)))


@pytest.mark.parametrize(("where", "value", "expected"), [
    (("runtime", "cleanup_grace_s"), "5s", 'runtime.cleanup_grace_s: must be a number of seconds (got "5s")'),
    (("job", "gpus_per_node"), "2", 'job.gpus_per_node: must be an integer (got "2")'),
    (("job", "time_limit"), 90, "job.time_limit: must be a string (got 90)"),
    (("job", "cpus_per_task"), -1, "job.cpus_per_task: must be at least 1 (got -1)"),
    (("name",), "-" + "x" * 100, 'name: must match [A-Za-z0-9][A-Za-z0-9._-]{0,63} (got "-' + "x" * 58 + '...)'),
    (("client", "env", "set", "HF_TOKEN"), 7, "client.env.set.HF_TOKEN: must be a string"),
])
def test_a_type_error_shows_the_unit_and_what_was_typed(where: tuple, value, expected: str) -> None:
    """A type, range or format error says what was typed (long values cut), and a `_s` field that
    it counts seconds; a value under `env` is never echoed (it may be a token)."""
    plan = json.loads((PLANS / "single-node.json").read_text())
    parent = plan
    for key in where[:-1]:
        parent = parent.setdefault(key, {})
    parent[where[-1]] = value
    with pytest.raises(PlanError) as caught:
        parse_plan(json.dumps(plan))
    assert expected == str(caught.value)


@pytest.mark.parametrize(("lead", "drain", "grace", "warned"), [(60, 30, 20, False), (60, 30, 30, True),
                                                                (0, 30, 30, False), (120, 0, 0, False)])
def test_a_stop_that_does_not_fit_the_pre_timeout_lead_is_warned_of(lead: int, drain: float, grace: float,
                                                                     warned: bool) -> None:
    """drain_s + stop_grace_s + cleanup_grace_s (here 5) must be shorter than the pre-timeout
    signal's lead; without a pre-timeout signal there is nothing to compare."""
    from dd_slurm.plan.checks import stop_warnings

    data = json.loads((PLANS / "single-node.json").read_text())
    data["job"]["pre_timeout_signal_s"] = lead
    data["runtime"]["cleanup_grace_s"] = 5
    data["gateway"] = {"drain_s": drain}
    data["client"]["stop_grace_s"] = grace
    expected = [f"warning: job.pre_timeout_signal_s: {lead} s does not hold the stop: gateway.drain_s {drain:g} + "
                f"client.stop_grace_s {grace:g} + runtime.cleanup_grace_s 5 = {drain + grace + 5:g} s; cleanup will "
                "cut them short"] if warned else []
    assert expected == stop_warnings(parse_plan(json.dumps(data)))
