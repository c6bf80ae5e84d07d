"""One read of the result: record count, size and sha256 come from the same bytes."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_slurm.errors import AttemptFailure
from dd_slurm.plan.records import Result
from dd_slurm.runtime.results import BLOCK, validate_result
from tests.conftest import FIXTURES

RESULTS = FIXTURES / "results"
CASES = [("three.jsonl", "jsonl", 3), ("two.json", "json", 2), ("three-rows.parquet", "parquet", 3),
         ("many-rows.parquet", "parquet", None), ("three.jsonl", "file", None)]


class CountingOpener:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, path, mode):
        self.opened.append(str(path))
        return open(path, mode)


@pytest.mark.parametrize("name, fmt, records", CASES)
def test_the_result_is_opened_once_and_described_by_those_bytes(name, fmt, records) -> None:
    """validate_result opens the file once; its sha256 and size are those of the file's bytes."""
    opener = CountingOpener()
    manifest = validate_result(RESULTS, Result(path=name, format=fmt, min_records=0), opener=opener)
    data = (RESULTS / name).read_bytes()
    assert [str(RESULTS.resolve() / name)] == opener.opened
    assert (hashlib.sha256(data).hexdigest(), len(data)) == (manifest["sha256"], manifest["bytes"])
    if records is not None:
        assert records == manifest["records"]


@given(lines=st.lists(st.sampled_from(['{"a": 1}', "", "  ", '[1, 2]', '"x"']), max_size=40),
       final_newline=st.booleans(), pad=st.integers(0, 3))
def test_jsonl_counts_across_block_boundaries(tmp_path_factory, lines, final_newline, pad) -> None:
    """Records straddling the read blocks count once; blank lines do not count."""
    directory = tmp_path_factory.mktemp("r")
    text = "\n".join(lines) + ("\n" if final_newline else "")
    filler = "\n" * (BLOCK - 3 + pad)  # puts the first record across the first block boundary
    (directory / "r.jsonl").write_text(filler + text)
    manifest = validate_result(directory, Result(path="r.jsonl", format="jsonl", min_records=0))
    assert sum(1 for line in lines if line.strip()) == manifest["records"]


def test_a_bad_line_is_named(tmp_path) -> None:
    """A line that is not JSON fails the result with its line number."""
    (tmp_path / "r.jsonl").write_text('{"a": 1}\n{oops\n')
    with pytest.raises(AttemptFailure, match="line 2"):
        validate_result(tmp_path, Result(path="r.jsonl", format="jsonl", min_records=0))


@pytest.mark.parametrize(("path", "shard", "written"), [
    ("part-{shard_index}.jsonl", (2, 4), "part-2.jsonl"),
    ("{num_shards}/part-{shard_index}.jsonl", (0, 3), "3/part-0.jsonl"),
    ("literal-{{x}}.jsonl", (0, 1), "literal-{x}.jsonl"),
])
def test_the_result_path_names_this_shards_file(tmp_path, path: str, shard: tuple[int, int], written: str) -> None:
    """`{shard_index}` and `{num_shards}` in result.path are this shard's (as in the client's
    argv), `{{`/`}}` a literal brace; the manifest names the file that was read."""
    (tmp_path / written).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / written).write_text('{"a": 1}\n')
    manifest = validate_result(tmp_path, Result(path=path, format="jsonl", min_records=1), shard)
    assert (written, 1) == (manifest["path"], manifest["records"])


@pytest.mark.parametrize(("present", "expected"), [
    ([], "part-1.jsonl was not written; the results dir is empty"),
    (["part-0.jsonl", "logs/"], "part-1.jsonl was not written; the results dir holds logs/, part-0.jsonl"),
    ([f"f{i}" for i in range(10)], "part-1.jsonl was not written; the results dir holds f0, f1, f2, f3, f4, f5, f6, f7"
                                   " and 2 more"),
])
def test_a_missing_result_says_what_the_results_dir_holds(tmp_path, present: list, expected: str) -> None:
    """result_missing names the file it looked for and what is there instead (first 8 by name)."""
    for name in present:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("x\n")
    with pytest.raises(AttemptFailure) as caught:
        validate_result(tmp_path, Result(path="part-{shard_index}.jsonl", format="jsonl", min_records=0), (1, 2))
    assert ("result_missing", expected) == (caught.value.reason, caught.value.detail)
