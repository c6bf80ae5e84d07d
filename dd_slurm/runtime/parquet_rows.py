"""Row count of a Parquet file from its footer (FileMetaData.num_rows), in pure Python.

The footer is Thrift compact protocol. The whole FileMetaData is decoded (every read bounded by the
footer, nesting bounded), the footer must be consumed exactly, and the fields the count depends on
must be present with their types and agree with each other: the row groups' rows add up to
num_rows, every row group has one chunk per leaf column of the schema, and every chunk lies inside
the file before the footer. Anything else is ParquetError (a ValueError), never a count."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

MAGIC = b"PAR1"
MAX_DEPTH = 32
BOOL, I8, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
_VARINT_BYTES = {I16: 3, I32: 5, I64: 10}
_INT_BITS = {I8: 8, I16: 16, I32: 32, I64: 64}


class ParquetError(ValueError):
    pass


S = "string"  # BINARY that must be UTF-8
# parquet.thrift, the structs under FileMetaData: field id -> (name, thrift type, required, nested).
# Nested is a struct name, or for lists the element's (type, struct name or None). Fields of the
# wrong type count as absent, as Thrift's generated readers skip them.
STRUCTS: dict[str, dict[int, tuple]] = {
    "FileMetaData": {1: ("version", I32, True, None), 2: ("schema", LIST, True, (STRUCT, "SchemaElement")),
                     3: ("num_rows", I64, True, None), 4: ("row_groups", LIST, True, (STRUCT, "RowGroup")),
                     5: ("key_value_metadata", LIST, False, (STRUCT, "KeyValue")), 6: ("created_by", S, False, None),
                     7: ("column_orders", LIST, False, (STRUCT, None))},
    "SchemaElement": {1: ("type", I32, False, None), 2: ("type_length", I32, False, None),
                      3: ("repetition_type", I32, False, None),
                      4: ("name", S, True, None), 5: ("num_children", I32, False, None),
                      6: ("converted_type", I32, False, None), 10: ("logicalType", STRUCT, False, "LogicalType")},
    "KeyValue": {1: ("key", S, True, None), 2: ("value", S, False, None)},
    "RowGroup": {1: ("columns", LIST, True, (STRUCT, "ColumnChunk")), 2: ("total_byte_size", I64, True, None),
                 3: ("num_rows", I64, True, None), 4: ("sorting_columns", LIST, False, (STRUCT, "SortingColumn"))},
    "SortingColumn": {1: ("column_idx", I32, True, None), 2: ("descending", BOOL, True, None),
                      3: ("nulls_first", BOOL, True, None)},
    "ColumnChunk": {1: ("file_path", S, False, None), 2: ("file_offset", I64, True, None),
                    3: ("meta_data", STRUCT, False, "ColumnMetaData")},
    "ColumnMetaData": {1: ("type", I32, True, None), 2: ("encodings", LIST, True, (I32, None)),
                       3: ("path_in_schema", LIST, True, (S, None)), 4: ("codec", I32, True, None),
                       5: ("num_values", I64, True, None), 6: ("total_uncompressed_size", I64, True, None),
                       7: ("total_compressed_size", I64, True, None),
                       8: ("key_value_metadata", LIST, False, (STRUCT, "KeyValue")),
                       9: ("data_page_offset", I64, True, None), 11: ("dictionary_page_offset", I64, False, None),
                       12: ("statistics", STRUCT, False, "Statistics"),
                       13: ("encoding_stats", LIST, False, (STRUCT, "PageEncodingStats")),
                       16: ("size_statistics", STRUCT, False, "SizeStatistics")},
    "Statistics": {1: ("max", BINARY, False, None), 2: ("min", BINARY, False, None), 3: ("null_count", I64, False, None),
                   4: ("distinct_count", I64, False, None), 5: ("max_value", BINARY, False, None),
                   6: ("min_value", BINARY, False, None)},
    "SizeStatistics": {1: ("unencoded_byte_array_data_bytes", I64, False, None),
                       2: ("repetition_level_histogram", LIST, False, (I64, None)),
                       3: ("definition_level_histogram", LIST, False, (I64, None))},
    "PageEncodingStats": {1: ("page_type", I32, True, None), 2: ("encoding", I32, True, None),
                          3: ("count", I32, True, None)},
    "LogicalType": {**{fid: (f"member {fid}", STRUCT, False, None) for fid in range(1, 19)},
                    5: ("DECIMAL", STRUCT, False, "DecimalType"), 7: ("TIME", STRUCT, False, "TimeType"),
                    8: ("TIMESTAMP", STRUCT, False, "TimeType"), 10: ("INTEGER", STRUCT, False, "IntType")},
    "DecimalType": {1: ("scale", I32, True, None), 2: ("precision", I32, True, None)},
    "TimeType": {1: ("isAdjustedToUTC", BOOL, True, None), 2: ("unit", STRUCT, True, None)},
    "IntType": {1: ("bitWidth", I8, True, None), 2: ("isSigned", BOOL, True, None)},
}


def _conform(record: dict, name: str, where: str) -> dict:
    """`record` with the fields STRUCTS lists for `name` (others dropped), checked recursively:
    required fields present with their type, strings UTF-8."""
    out = {}
    for fid, (field, ftype, required, nested) in STRUCTS[name].items():
        found = record.get(fid)
        wire = BINARY if ftype == S else ftype
        if found is None or found[0] != wire:
            if required:
                raise ParquetError(f"Parquet footer: {where}.{field} is missing")
            continue
        out[fid] = _conform_value(found[1], ftype, nested, f"{where}.{field}")
    return out


def _conform_value(value: Any, ftype: Any, nested: Any, where: str) -> Any:
    if ftype == S:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise ParquetError(f"Parquet footer: {where} is not UTF-8") from None
    if ftype == STRUCT:
        return _conform(value, nested, where) if nested else value
    if ftype == LIST:
        etype, items = value
        want, struct_name = nested
        if items and etype != (BINARY if want == S else want):
            raise ParquetError(f"Parquet footer: {where} has elements of thrift type {etype}")
        return [_conform_value(item, want, struct_name, f"{where}[{i}]") for i, item in enumerate(items)]
    return value


class _Reader:
    """A bounded Thrift compact-protocol decoder: structs become {field id: (type, value)}."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, count: int) -> bytes:
        if count < 0 or self.pos + count > len(self.data):
            raise ParquetError(f"footer truncated at byte {self.pos}")
        chunk = self.data[self.pos:self.pos + count]
        self.pos += count
        return chunk

    def byte(self) -> int:
        return self.take(1)[0]

    def varint(self, max_bytes: int = 10) -> int:
        result = 0
        for index in range(max_bytes):
            b = self.byte()
            result |= (b & 0x7F) << (7 * index)
            if not b & 0x80:
                return result
        raise ParquetError(f"varint longer than {max_bytes} bytes at byte {self.pos}")

    def integer(self, ftype: int) -> int:
        if ftype == I8:
            return struct.unpack("<b", self.take(1))[0]
        n = self.varint(_VARINT_BYTES[ftype])
        value = (n >> 1) ^ -(n & 1)
        bits = _INT_BITS[ftype]
        if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
            raise ParquetError(f"integer out of range for its type at byte {self.pos}")
        return value

    def value(self, ftype: int, depth: int, in_container: bool = False) -> Any:
        if depth > MAX_DEPTH:
            raise ParquetError("footer nested too deeply")
        if ftype in (BOOL, 2):
            if not in_container:
                return ftype == BOOL
            b = self.byte()
            if b not in (0, 1, 2):
                raise ParquetError(f"bad boolean at byte {self.pos}")
            return b == 1
        if ftype in _INT_BITS:
            return self.integer(ftype)
        if ftype == DOUBLE:
            return struct.unpack("<d", self.take(8))[0]
        if ftype == BINARY:
            return self.take(self.varint(5))
        if ftype in (LIST, SET):
            return self.sequence(depth)
        if ftype == MAP:
            return self.mapping(depth)
        if ftype == STRUCT:
            return self.fields(depth + 1)
        raise ParquetError(f"unknown thrift type {ftype} at byte {self.pos}")

    def _element_type(self, etype: int, size: int) -> None:
        if not (1 if size else 0) <= etype <= STRUCT:  # fastparquet writes empty lists with type 0
            raise ParquetError(f"unknown thrift element type {etype} at byte {self.pos}")

    def _size(self, size: int) -> int:
        if size > len(self.data) - self.pos:  # every element takes at least one byte
            raise ParquetError(f"container of {size} elements cannot fit at byte {self.pos}")
        return size

    def sequence(self, depth: int) -> tuple[int, list]:
        header = self.byte()
        size, etype = header >> 4, header & 0x0F
        size = self._size(self.varint(5) if size == 15 else size)
        self._element_type(etype, size)
        return etype, [self.value(etype, depth + 1, True) for _ in range(size)]

    def mapping(self, depth: int) -> list:
        size = self._size(self.varint(5))
        if not size:
            return []
        types = self.byte()
        self._element_type(types >> 4, size)
        self._element_type(types & 0x0F, size)
        return [(self.value(types >> 4, depth + 1, True), self.value(types & 0x0F, depth + 1, True))
                for _ in range(size)]

    def fields(self, depth: int) -> dict[int, tuple[int, Any]]:
        out: dict[int, tuple[int, Any]] = {}
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return out
            delta, ftype = header >> 4, header & 0x0F
            fid = last + delta if delta else self.integer(I16)
            if fid in out:
                raise ParquetError(f"field {fid} repeated at byte {self.pos}")
            out[fid] = (BOOL if ftype == 2 else ftype, self.value(ftype, depth))
            last = fid


PHYSICAL_TYPES = range(0, 8)  # BOOLEAN .. FIXED_LEN_BYTE_ARRAY
FIXED_LEN_BYTE_ARRAY = 7
CODECS = range(0, 8)  # UNCOMPRESSED .. LZ4_RAW
GROUP_LOGICAL = {2, 3}  # MAP, LIST: the only logical types of a group
GROUP_CONVERTED = {1, 2, 3}  # MAP, MAP_KEY_VALUE, LIST
INT_WIDTHS = {8, 16, 32, 64}


def _leaf_columns(schema: list[dict]) -> int:
    """Leaves of the schema tree (element 0 is the root); the tree must be exactly the list, and
    every leaf a known physical type."""
    if not schema:
        raise ParquetError("Parquet footer: empty schema")
    leaves, pending = 0, 1  # elements still expected, the root counted
    for index, element in enumerate(schema):
        if pending == 0:
            raise ParquetError("Parquet footer: schema has elements outside its tree")
        pending -= 1
        children = element.get(5, 0)
        if children < 0 or (index == 0 and not children and len(schema) > 1):
            raise ParquetError(f"Parquet footer: schema element {index} has {children} children")
        _check_logical(element, index, group=children > 0 or index == 0)
        pending += children
        if not children and index:
            leaves += 1
    if pending:
        raise ParquetError("Parquet footer: schema tree is incomplete")
    return leaves


def _check_logical(element: dict, index: int, group: bool) -> None:
    logical = set(element.get(10, {}))
    kind = element.get(1)
    if group:
        if (10 in element and (len(logical) != 1 or logical - GROUP_LOGICAL)) or element.get(6, 1) not in GROUP_CONVERTED:
            raise ParquetError(f"Parquet footer: schema element {index} is a group with a leaf's logical type")
    elif kind not in PHYSICAL_TYPES:
        raise ParquetError(f"Parquet footer: schema element {index} has no valid physical type ({kind})")
    elif kind == FIXED_LEN_BYTE_ARRAY and element.get(2, 0) <= 0:
        raise ParquetError(f"Parquet footer: schema element {index} is fixed-length without a length")
    elif not _annotation_fits(element, kind):  # type: ignore[arg-type]  # kind is in PHYSICAL_TYPES here
        raise ParquetError(f"Parquet footer: schema element {index} has an annotation its type {kind} cannot carry")
    if index and 3 not in element:
        raise ParquetError(f"Parquet footer: schema element {index} has no repetition type")
    if 10 in logical and element[10][10][1] not in INT_WIDTHS:
        raise ParquetError(f"Parquet footer: schema element {index} has an integer width of {element[10][10][1]}")
    if element.get(3, 0) not in (0, 1, 2):
        raise ParquetError(f"Parquet footer: schema element {index} has repetition {element[3]}")


INT32, INT64, BYTE_ARRAY = 1, 2, 6
# converted_type -> the physical types it may annotate (parquet-format's LogicalTypes.md)
CONVERTED_FITS = {**dict.fromkeys((0, 4, 19, 20), {BYTE_ARRAY}), 5: {INT32, INT64, BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY},
                  **dict.fromkeys((6, 7, 11, 12, 13, 15, 16, 17), {INT32}),
                  **dict.fromkeys((8, 9, 10, 14, 18), {INT64}), 21: {FIXED_LEN_BYTE_ARRAY}}
# logicalType union member -> the physical types it may annotate; None: any
LOGICAL_FITS = {1: {BYTE_ARRAY}, 4: {BYTE_ARRAY}, 5: {INT32, INT64, BYTE_ARRAY, FIXED_LEN_BYTE_ARRAY}, 6: {INT32},
                7: {INT32, INT64}, 8: {INT64}, 10: {INT32, INT64}, 11: None, 12: {BYTE_ARRAY}, 13: {BYTE_ARRAY},
                14: {FIXED_LEN_BYTE_ARRAY}, 15: {FIXED_LEN_BYTE_ARRAY}, 17: {BYTE_ARRAY}, 18: {BYTE_ARRAY}}


def _annotation_fits(element: dict, kind: int) -> bool:
    """A leaf's logical type (or, without one, its converted type) suits its physical type."""
    if 10 in element:
        members = list(element[10])
        if len(members) != 1 or members[0] not in LOGICAL_FITS:
            return False
        fits = LOGICAL_FITS[members[0]]
        return fits is None or kind in fits
    if 6 in element:
        return kind in CONVERTED_FITS.get(element[6], ())
    return True


def _check_row_group(group: dict, leaves: int, footer_start: int) -> int:
    rows, columns = group[3], group[1]
    if rows < 0 or len(columns) != leaves:
        raise ParquetError(f"Parquet footer: row group with {rows} rows and {len(columns)} of {leaves} columns")
    for chunk in columns:
        meta = chunk.get(3)
        if meta is None:
            continue
        offsets = [meta[9]] + ([meta[11]] if 11 in meta else [])  # a chunk starts at its dictionary page
        pages = [o for o in offsets if o]  # 0: no such page (an empty chunk)
        start, size = min(pages, default=4), meta[7]
        if min(offsets) < 0 or start < 4 or size < 0 or start + size > footer_start:
            raise ParquetError("Parquet footer: a column chunk lies outside the file's data")
        if meta[1] not in PHYSICAL_TYPES or meta[4] not in CODECS:
            raise ParquetError(f"Parquet footer: a column chunk has physical type {meta[1]}, codec {meta[4]}")
    return rows


def _footer_of(data: bytes) -> tuple[bytes, int]:
    """The footer bytes and the file's size."""
    size = len(data)
    if size < 12:
        raise ParquetError("not a Parquet file (shorter than its magic and footer)")
    if data[:4] != MAGIC or data[-4:] != MAGIC:
        raise ParquetError("not a Parquet file (PAR1 magic missing)")
    (length,) = struct.unpack("<I", data[-8:-4])
    if not 0 < length <= size - 12:
        raise ParquetError(f"Parquet footer length {length} does not fit in a file of {size} bytes")
    return data[size - 8 - length:size - 8], size


def parquet_num_rows(path: Path) -> int:
    return parquet_rows_of(Path(path).read_bytes())


def parquet_rows_of(data: bytes) -> int:
    """num_rows from a whole Parquet file's bytes (the ones whose sha256 is recorded), after the
    footer has been decoded exactly and checked."""
    footer, size = _footer_of(data)
    length = len(footer)
    reader = _Reader(footer)
    meta: Any = reader.fields(0)
    if reader.pos != length:
        raise ParquetError(f"Parquet footer: {length - reader.pos} bytes after FileMetaData")
    meta = _conform(meta, "FileMetaData", "FileMetaData")
    num_rows = meta[3]
    leaves = _leaf_columns(meta[2])
    if 7 in meta and len(meta[7]) != leaves:
        raise ParquetError(f"Parquet footer: {len(meta[7])} column orders for {leaves} columns")
    total = sum(_check_row_group(group, leaves, size - 8 - length) for group in meta[4])
    if num_rows < 0 or total != num_rows:
        raise ParquetError(f"Parquet footer: num_rows {num_rows} but its row groups hold {total}")
    return num_rows
