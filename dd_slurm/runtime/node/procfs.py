"""This node's processes as /proc shows them (standard library only, and no pathlib: every step
imports this before its program starts). A stat line is parsed from its last ')': the command
name between the parentheses may itself hold spaces and parentheses."""

from __future__ import annotations

import os

PROC = "/proc"
# A process table row: {"comm", "ppid", "pgid", "sid", "start_time"} (start time in clock ticks since boot).
Row = dict


def parse_stat(text: str) -> Row:
    """The fields of one /proc/PID/stat line this package reads."""
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    return {"comm": head.partition("(")[2], "ppid": int(fields[1]), "pgid": int(fields[2]), "sid": int(fields[3]),
            "start_time": int(fields[19])}


def read_stat(pid: int | str, proc: str | os.PathLike = PROC) -> Row | None:
    """`pid`'s stat row; None when the process is gone (or its stat cannot be read or parsed)."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as handle:
            return parse_stat(handle.read())
    except (OSError, IndexError, ValueError):
        return None


def start_time(pid: int | str) -> int | None:
    """Clock ticks since boot at which `pid` started (field 22 of /proc/PID/stat); None if gone."""
    row = read_stat(pid)
    return None if row is None else row["start_time"]


def process_table(proc: str | os.PathLike = PROC) -> dict[int, Row]:
    """pid -> stat row of every process readable in one pass over /proc (one gone mid-read is left out)."""
    table = {}
    for name in os.listdir(proc):
        if name.isdigit():
            row = read_stat(name, proc)
            if row is not None:
                table[int(name)] = row
    return table


def descendants(roots: set[int], table: dict[int, Row]) -> set[int]:
    """Every process below `roots` by parent pid (the roots themselves only when one descends from another)."""
    children: dict[int, list[int]] = {}
    for pid, row in table.items():
        children.setdefault(row["ppid"], []).append(pid)
    seen, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def ancestors(pid: int, table: dict[int, Row]) -> set[int]:
    """`pid` and its parents up the table (a loop in a table read mid-change ends the walk)."""
    found = set()
    while pid in table and pid not in found:
        found.add(pid)
        pid = table[pid]["ppid"]
    return found


def node_name() -> str:
    """This node's short name: Slurm's SLURMD_NODENAME, else the host name up to its first dot."""
    import _socket

    return os.environ.get("SLURMD_NODENAME") or _socket.gethostname().split(".")[0]
