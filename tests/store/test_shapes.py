"""The plain-data record shapes (store/shapes) read what the strict converter reads, alike: for any
JSON value built near a record (each field its own type, a neighbour's or junk; keys missing, extra
or misspelt), the shape gives the converter's JSON form of its attrs record, or the same first
error. attempt.json's reference is tests/store/attempt_reference.py; readiness.json's is the
runtime's own attrs record (store/readiness)."""

from __future__ import annotations

import collections.abc
import typing
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.store.attempt_record import ATTEMPT_RECORD
from dd_slurm.store.converter import CONVERTER, RecordInvalid, structure_checked
from dd_slurm.store.readiness import ReadinessRecord, ReplicaReadiness
from dd_slurm.store.readiness_shape import READINESS
from dd_slurm.store.shapes import Invalid, checked
from tests.store.attempt_reference import AttemptRecord, reference_record

WORDS = ["", "5", "5_3", "0", "-1", "/abs/path", "rel/path", "n1", "bell\x07", "lone\ud800", "--all", "run",
         "sacct", "none", "running", "pending", "ready", "lost", "stopped", "failed", "published", "withdrawn"]
JUNK = st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=True) | st.sampled_from(WORDS) | \
    st.lists(st.integers(0, 3), max_size=2) | st.dictionaries(st.sampled_from(["a", "time"]), st.integers(0, 2), max_size=2)
TEXT = st.sampled_from(WORDS) | st.sampled_from(WORDS) | st.text(max_size=6)


def mostly(good: st.SearchStrategy) -> st.SearchStrategy:
    """`good` four times in five, junk otherwise: most records get past their first field."""
    return st.sampled_from([1, 1, 1, 1, 0]).flatmap(lambda n: good if n else JUNK)


JOB_IDS = st.sampled_from(["5", "5_3", "4294967", "0", "5_"])
BY_NAME = {"job_id": JOB_IDS, "array_job_id": JOB_IDS, "bin_dir": st.sampled_from(["/usr/bin", "bin", "/b\x01"]),
           "slurm_conf": st.sampled_from(["/etc/slurm.conf", "slurm.conf"]), "name": st.sampled_from(["c1", "-c", "c 1"]),
           "reconcile_deadline_s": st.sampled_from([300, 0.5, 0, -1]),
           "detail": st.sampled_from([None, "exited 1", "bell\x07", "lone\ud800"]),
           "state": st.sampled_from(["pending", "starting", "ready", "lost", "failed", "stopped", "running", "bogus"]),
           "schema": st.just(2),
           "endpoints": st.sampled_from(["unpublished", "published", "withdrawn"]),
           "deployments": st.dictionaries(st.sampled_from(["small-0", "big-1"]), st.deferred(lambda: near(ReplicaReadiness)),
                                          max_size=2)}


def of_type(kind: Any) -> st.SearchStrategy:
    """Values of the JSON form of `kind`, and now and then something else."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:
        return st.none() | of_type(next(a for a in args if a is not type(None)))  # its type, mostly
    if origin is tuple:
        return st.lists(of_type(args[0]), max_size=3)
    if origin in (dict, collections.abc.Mapping):
        return st.dictionaries(TEXT, of_type(args[1]) if args[1] is not Any else JUNK, max_size=2)
    if attrs.has(kind):
        return near(kind)
    base = {str: TEXT, bool: st.booleans(), int: st.integers(-2, 10**12), float: st.floats(allow_nan=True) |
            st.integers(-2, 2 * 10**9)}.get(kind, JUNK)
    return mostly(base)


ABSENT = object()


def near(cls: type) -> st.SearchStrategy:
    """JSON objects near an attrs record: its required fields mostly there, any of its others,
    now and then an unknown or misspelt key."""
    hints = typing.get_type_hints(cls)

    def value(f: attrs.Attribute) -> st.SearchStrategy:
        return st.deferred(lambda: mostly(BY_NAME[f.name] if f.name in BY_NAME else of_type(hints[f.name])))

    required = {f.name: st.sampled_from([1] * 7 + [0]).flatmap(lambda n, f=f: value(f) if n else st.just(ABSENT))
                for f in attrs.fields(cls) if f.default is attrs.NOTHING}
    others = {f.name: value(f) for f in attrs.fields(cls) if f.default is not attrs.NOTHING}
    extra = st.dictionaries(st.sampled_from(["zzz", "jobid", "tme", "statee"]), JUNK, max_size=1)
    return st.builds(lambda fields_, extra_: {**{k: v for k, v in fields_.items() if v is not ABSENT}, **extra_},
                     st.fixed_dictionaries(required, optional=others), st.one_of(st.just({}), st.just({}), extra))


def outcome(read: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", read()
    except (RecordInvalid, Invalid) as err:
        return "error", str(err)


def same_reading(shape: Any, reference: Callable[[Any], Any], data: Any) -> None:
    assert outcome(lambda: reference(data)) == outcome(lambda: checked(data, shape))


@settings(max_examples=600, deadline=None)
@given(data=mostly(near(AttemptRecord)))
def test_attempt_shape_reads_as_the_converter_reads_the_attrs_record(data) -> None:
    """attempt.json: the same JSON form, or the same first error, as the attrs reference."""
    same_reading(ATTEMPT_RECORD, reference_record, data)


@pytest.mark.parametrize("data", [
    {"observations": [{"time": 1, "state": "running", "terminal": False}], "cancel_requests": [{"time": 2}]},
    {"shard": {"run_id": "r", "index": 3, "count": 2}},
    {"observations": [{"time": 1, "state": "x", "terminal": False, "zzz": 1}]},
    {"jobid": "5"},
    {"cancel_requests": [{"time": 1, "via": None}]},
    {"cluster": {"name": "c1", "bin_dir": "/usr/bin"}},
    ["not", "an", "object"],
])
def test_attempt_shape_on_named_cases(data) -> None:
    """Cases a generator may seldom build: a field's int as float, a whole-record check, an
    unknown key after valid fields, a misspelt key, an omitted null, a nested record, a list."""
    same_reading(ATTEMPT_RECORD, reference_record, data)


def reference_readiness(data: Any) -> dict[str, Any]:
    return CONVERTER.unstructure(structure_checked(data, ReadinessRecord))


@settings(max_examples=600, deadline=None)
@given(data=mostly(near(ReadinessRecord)))
def test_readiness_shape_reads_as_the_converter_reads_the_runtimes_record(data) -> None:
    """readiness.json: the same JSON form, or the same first error, as the runtime's attrs record."""
    same_reading(READINESS, reference_readiness, data)


REPLICA = {"state": "ready", "deployment": "small", "replica": 0, "expected": 1, "ready": ["http://n1:1/v1"],
           "deadline": 5, "last_probe": {"ok": True}}


@pytest.mark.parametrize("replica", [
    {},
    {"detail": "exited 1\x07"},
    {"nodes": None},
    {"port": 8000.0},
    {"deadline": None, "last_probe": None},
    {"state": "lost", "zzz": 1},
])
def test_readiness_shape_on_named_cases(replica) -> None:
    """Cases a generator may seldom build: free text with a control character (kept), a null
    tuple, a float port, null required values, an unknown key beside a valid state."""
    data = {"schema": 2, "endpoints": "published", "deployments": {"small-0": {**REPLICA, **replica}}}
    same_reading(READINESS, reference_readiness, data)
