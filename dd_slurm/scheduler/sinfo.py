"""What each node of a partition holds, from

  sinfo --noheader --Node --format=%N|%P|%c|%m|%G

(node | partition, `*` marking the default | CPUs | memory in MB | generic resources such as
`gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:2,shard:8` or `(null)`). A node is one row per partition it is
in. A line that does not fit raises OutputError naming it."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from dd_slurm.errors import OutputError

SINFO_FORMAT = "%N|%P|%c|%m|%G"
_COUNT = re.compile(r"[0-9]{1,6}\Z", re.ASCII)
_MEMORY = re.compile(r"[0-9]{1,12}\+?\Z", re.ASCII)  # `4000`, or `4000+` for a range over nodes


class NodeRow(NamedTuple):
    node: str
    partition: str
    default: bool
    cpus: int
    memory_mb: int
    gpus: int


def gpu_count(gres: str) -> int:
    """GPUs in a node's GRES text: the sum over its `gpu` entries of the count after the last `:`
    (before any `(S:...)` socket note); 0 for `(null)`."""
    total = 0
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        name, _, rest = entry.partition(":")
        if name.strip() != "gpu" or not rest:
            continue
        count = rest.rsplit(":", 1)[-1]
        total += int(count) if _COUNT.match(count) else 0
    return total


def parse_nodes(text: str) -> list[NodeRow]:
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != 5 or not _COUNT.match(parts[2]) or not _MEMORY.match(parts[3]) or not parts[0]:
            raise OutputError(f"sinfo line {number}: not node|partition|cpus|memory|gres: {line[:120]!r}")
        partition = parts[1].rstrip("*")
        rows.append(NodeRow(parts[0], partition, parts[1].endswith("*"), int(parts[2]),
                            int(parts[3].rstrip("+")), gpu_count(parts[4])))
    return rows


def partition_nodes(rows: list[NodeRow], partition: Optional[str]) -> tuple[Optional[str], list[NodeRow]]:
    """(the partition's name, its nodes): the named partition, or the default one."""
    name = partition or next((r.partition for r in rows if r.default), None)
    return name, [r for r in rows if r.partition == name]
