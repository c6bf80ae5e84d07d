"""The resolved plan v1: strict structure, field-path errors, control characters, digest."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from hypothesis import given, strategies as st

from dd_slurm import fields
from dd_slurm.errors import PlanError
from dd_slurm.plan import canonical_json, load_plan, parse_plan, plan_digest, plan_to_data
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
