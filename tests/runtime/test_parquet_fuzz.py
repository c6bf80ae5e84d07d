"""The pure-Python Parquet footer reader against pyarrow (a test-only dependency): the same count
for every valid file (pyarrow with several writer options, and files polars and fastparquet wrote,
under fixtures/results/parquet/), and for byte mutations of them: whatever pyarrow's footer reader
rejects is a ParquetError here, never a count; whatever both accept has the same count."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dd_slurm.runtime.parquet_rows import ParquetError, parquet_num_rows
from tests.conftest import FIXTURES

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

OTHERS = FIXTURES / "results" / "parquet"
WRITERS = {
    "plain": dict(compression="none", use_dictionary=False),
    "snappy-dict": dict(compression="snappy"),
    "zstd-groups": dict(compression="zstd", row_group_size=7),
    "v1-pages": dict(version="1.0", data_page_version="1.0"),
    "v2-pages-no-stats": dict(data_page_version="2.0", write_statistics=False),
    "checksums": dict(write_page_checksum=True, compression="gzip"),
}


def _table(rows: int):
    return pa.table({"id": list(range(rows)), "text": [f"row-{i}" for i in range(rows)],
                     "nested": [{"x": i, "tags": ["a"] * (i % 3)} for i in range(rows)]})


def _written(options: dict, rows: int) -> bytes:
    sink = io.BytesIO()
    pq.write_table(_table(rows), sink, store_schema=False, **options)
    return sink.getvalue()


BASES = {f"pyarrow-{name}-{rows}": _written(options, rows) for name, options in WRITERS.items() for rows in (0, 3, 20)}
BASES.update({path.name: path.read_bytes() for path in sorted(OTHERS.glob("*.parquet"))})


def _ours(data: bytes, tmp_path) -> int | ParquetError:
    path = tmp_path / "f.parquet"
    path.write_bytes(data)
    try:
        return parquet_num_rows(path)
    except ParquetError as err:
        return err


REJECTED, ARROW_ONLY = "rejected", "arrow-only"
# pyarrow's refusals that come after the Parquet footer was read, from its conversion to an Arrow
# schema: a damaged `ARROW:schema` blob (Arrow's private serialized schema, which polars writes) or
# a nesting Arrow cannot map. They say nothing about the row count, so either answer is allowed.
ARROW_CONVERSION = ("base64", "flatbuffer", "IPC", "Unrecognized type", "MetadataVersion", "metadata version",
                    "Type metadata", "schema message", "Map keys must be", "LIST-annotated", "must have exactly",
                    "Unexpected null field", "metadata bytes, but only read", "Integers ", "Time is 64 bits")


def _theirs(data: bytes) -> int | str:
    """pyarrow's count; REJECTED when it refuses the file; ARROW_ONLY as above."""
    try:
        return pq.read_metadata(pa.BufferReader(data)).num_rows
    except Exception as err:
        return ARROW_ONLY if any(text in str(err) for text in ARROW_CONVERSION) else REJECTED


@pytest.mark.parametrize("name", sorted(BASES))
def test_valid_files_count_as_pyarrow_counts(name: str, tmp_path) -> None:
    """Every unmodified file: our count is pyarrow's."""
    assert _theirs(BASES[name]) == _ours(BASES[name], tmp_path)


def test_files_other_writers_wrote_have_their_recorded_counts() -> None:
    """polars and fastparquet files (committed, with the counts they were written with)."""
    expected = json.loads((OTHERS / "expected.json").read_text())["rows"]
    assert expected == {name: parquet_num_rows(OTHERS / name) for name in expected}


def _mutate(data: bytes, edits: list[tuple[str, float, int]]) -> bytes:
    """Edits at positions biased to the tail (the footer): flip, set, insert, delete, truncate."""
    out = bytearray(data)
    for kind, where, value in edits:
        if not out:
            break
        tail = min(len(out), 600)
        pos = len(out) - 1 - int(where * tail) if where < 1 else int((where - 1) * len(out))
        pos = max(0, min(pos, len(out) - 1))
        if kind == "flip":
            out[pos] ^= 1 << (value % 8)
        elif kind == "set":
            out[pos] = value
        elif kind == "insert":
            out.insert(pos, value)
        elif kind == "delete":
            del out[pos]
        else:
            del out[pos:]
    return bytes(out)


edits = st.lists(st.tuples(st.sampled_from(["flip", "flip", "set", "insert", "delete", "truncate"]),
                           st.floats(0, 1.999), st.integers(0, 255)), min_size=1, max_size=4)


@settings(max_examples=200)
@given(st.sampled_from(sorted(BASES)), edits)
def test_mutants_pyarrow_rejects_are_errors_here(tmp_path_factory, name: str, changes) -> None:
    """Byte mutations of valid files: pyarrow rejects -> ParquetError here; both accept -> same count.
    Nothing else escapes the reader (no IndexError, no count from a damaged footer)."""
    data = _mutate(BASES[name], changes)
    theirs, ours = _theirs(data), _ours(data, tmp_path_factory.mktemp("m"))
    if theirs == REJECTED:
        assert isinstance(ours, ParquetError), f"pyarrow rejects, we counted {ours}"
    elif theirs != ARROW_ONLY and not isinstance(ours, ParquetError):
        assert theirs == ours


@pytest.mark.parametrize(("data", "why"), [
    (b"PAR1" + b"\x00" * 4 + b"PAR1", "shorter"),
    (b"PAR1\x15\x00\x00\x00PAR1\x00\x00\x00\x00PAR1", "does not fit"),
    (b"PAR1" + b"\x19\x0c" + b"\x05\x00\x00\x00PAR1", "footer length"),
])
def test_malformed_footers_name_what_is_wrong(tmp_path, data: bytes, why: str) -> None:
    """Short files, footer lengths beyond the file, and truncated thrift are ParquetError."""
    path = tmp_path / "x.parquet"
    path.write_bytes(data)
    with pytest.raises(ParquetError) as caught:
        parquet_num_rows(path)
    assert why in str(caught.value) or "truncated" in str(caught.value) or "fit" in str(caught.value)


def test_trailing_bytes_after_the_metadata_are_rejected(tmp_path) -> None:
    """The footer must be consumed exactly (pyarrow itself tolerates trailing bytes)."""
    data = BASES["pyarrow-plain-3"]
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8] + b"\x00\x00"
    path = tmp_path / "t.parquet"
    path.write_bytes(data[:-8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1")
    with pytest.raises(ParquetError) as caught:
        parquet_num_rows(path)
    assert "bytes after FileMetaData" in str(caught.value)
