"""Row count of a Parquet file from its footer (FileMetaData.num_rows), in pure Python.

The footer is Thrift compact protocol: we read field 3 (num_rows, i64) of FileMetaData and skip
everything else, so no compiled Parquet library is needed on compute nodes."""

from __future__ import annotations

import struct
from pathlib import Path

MAGIC = b"PAR1"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, ftype: int) -> None:
        if ftype in (1, 2):  # bool true/false carried in the type
            return
        if ftype == 3:
            self.pos += 1
        elif ftype in (4, 5, 6):
            self.varint()
        elif ftype == 7:
            self.pos += 8
        elif ftype == 8:
            length = self.varint()  # not `self.pos += self.varint()`: that reads pos before varint moves it
            self.pos += length
        elif ftype in (9, 10):
            header = self.byte()
            size, etype = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            for _ in range(size):
                self.skip(etype)
        elif ftype == 11:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif ftype == 12:
            self.struct_fields(lambda _fid, t: self.skip(t))
        else:
            raise ValueError(f"unknown thrift type {ftype}")

    def struct_fields(self, visit) -> None:
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return
            delta, ftype = header >> 4, header & 0x0F
            fid = last + delta if delta else self.zigzag()
            visit(fid, ftype)
            last = fid


def parquet_num_rows(path: Path) -> int:
    return parquet_rows_of(Path(path).read_bytes())


def parquet_rows_of(data: bytes) -> int:
    """num_rows from a whole Parquet file's bytes."""
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise ValueError("not a Parquet file (PAR1 magic missing)")
    (length,) = struct.unpack("<I", data[-8:-4])
    reader = _Reader(data[-8 - length:-8])
    found: list[int] = []

    def visit(fid: int, ftype: int) -> None:
        if fid == 3 and ftype == 6:
            found.append(reader.zigzag())
        else:
            reader.skip(ftype)

    reader.struct_fields(visit)
    if not found:
        raise ValueError("Parquet footer has no num_rows")
    return found[0]
