"""sinfo's per-node rows: recorded output of the three lab releases and a site-like table parse
to the reviewed rows; any line that does not fit is an error naming it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import OutputError
from dd_slurm.scheduler.sinfo import NodeRow, gpu_count, parse_nodes, partition_nodes
from tests.conftest import FIXTURES

SINFO = FIXTURES / "slurm" / "sinfo"
EXPECTED = [line.split("\t") for line in (SINFO / "expected.tsv").read_text().splitlines() if not line.startswith("#")]


@pytest.mark.parametrize("name", sorted({row[0] for row in EXPECTED}))
def test_recorded_sinfo_parses_to_the_reviewed_rows(name: str) -> None:
    expected = [NodeRow(r[1], r[2], r[3] == "True", int(r[4]), int(r[5]), int(r[6])) for r in EXPECTED if r[0] == name]
    assert expected == parse_nodes((SINFO / name).read_text())


@pytest.mark.parametrize(("gres", "gpus"), [("gpu:4", 4), ("gpu:a100:8(S:0-1)", 8), ("gpu:a100:4(S:0),gpu:v100:2(S:1)", 6),
                                            ("gpu:2,shard:16", 2), ("(null)", 0), ("mps:100", 0), ("gpu", 0),
                                            ("gpu:a100:4(S:0,1),mps:100", 4)])
def test_gpus_are_counted_from_every_gpu_entry(gres: str, gpus: int) -> None:
    """Typed and untyped `gpu` entries add up; socket notes (which may hold commas) and other GRES
    (shard, mps) do not count."""
    assert gpus == gpu_count(gres)


@pytest.mark.parametrize("line", ["n1|debug*|2|4000", "n1|debug*|two|4000|gpu:1", "n1|debug*|2|4G|gpu:1",
                                  "|debug*|2|4000|gpu:1", "n1|debug*|2|4000|gpu:1|extra"])
def test_a_line_that_does_not_fit_is_an_error_naming_it(line: str) -> None:
    with pytest.raises(OutputError, match=r"sinfo line 2: not node\|partition\|cpus\|memory\|gres"):
        parse_nodes("n0|debug*|2|4000|gpu:1\n" + line + "\n")


def test_the_default_partition_is_the_starred_one() -> None:
    rows = parse_nodes((SINFO / "site.txt").read_text())
    assert ("gpu", ["gpu01", "gpu02", "mig01"]) == (lambda p: (p[0], [r.node for r in p[1]]))(partition_nodes(rows, None))
    assert ("long", ["gpu01"]) == (lambda p: (p[0], [r.node for r in p[1]]))(partition_nodes(rows, "long"))


names = st.text(st.sampled_from("abcnz019-_"), min_size=1, max_size=12)


@given(st.lists(st.tuples(names, names, st.booleans(), st.integers(0, 999_999), st.integers(0, 10**12 - 1),
                          st.integers(0, 64), st.sampled_from(["", "a100:", "h100:"])), max_size=20))
def test_rendered_rows_parse_back(rows) -> None:
    """Whatever the names and counts, a row sinfo could print parses to what it says."""
    text = "".join(f"{n}|{p}{'*' if d else ''}|{c}|{m}|{f'gpu:{t}{g}' if g else '(null)'}\n" for n, p, d, c, m, g, t in rows)
    assert [NodeRow(n, p, d, c, m, g) for n, p, d, c, m, g, _ in rows] == parse_nodes(text)
