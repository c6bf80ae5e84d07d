"""Who listens on a port, checked on the node itself (standard library only).

A listening socket is found in /proc/net/tcp and tcp6 (state 0A) by its local port and address;
its owners are the processes holding `socket:[INODE]` among their /proc/PID/fd links. A listener
is ours when every owner belongs to the step's process tree: the launched process (same pid and
start time, so not a reused pid), its process group (the task Slurm started leads one), and every
descendant by parent pid. Only listeners a connection to the node's address could reach count:
those bound to that address, to a wildcard, or to its IPv4-mapped IPv6 form.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from typing import Optional

LISTEN = "0A"
PROC = Path("/proc")


def parse_hex_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """/proc/net/tcp{,6} local address: 8 or 32 hex digits, each 32-bit word in host byte order."""
    raw = bytes.fromhex(text)
    words = [raw[i:i + 4][::-1] if sys.byteorder == "little" else raw[i:i + 4] for i in range(0, len(raw), 4)]
    packed = b"".join(words)
    return ipaddress.IPv4Address(packed) if len(packed) == 4 else ipaddress.IPv6Address(packed)


def listening(port: int, proc: Path = PROC) -> list[dict]:
    """Every listening TCP socket on `port`: {"address", "inode"}."""
    return listening_sockets(proc).get(port, [])


def listening_sockets(proc: Path = PROC) -> dict[int, list[dict]]:
    """Every listening TCP socket on this node, by port: {"address", "inode"} (one read of each table)."""
    found: dict[int, list[dict]] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            found.setdefault(int(hex_port, 16), []).append(
                {"address": str(parse_hex_address(address)), "inode": int(fields[9])})
    return found


def reachable(listener_address: str, node_address: str) -> bool:
    """Would a connection to node_address reach a socket bound to listener_address?"""
    bound = ipaddress.ip_address(listener_address)
    node = ipaddress.ip_address(node_address)
    if bound.is_unspecified:
        return True
    if isinstance(bound, ipaddress.IPv6Address) and bound.ipv4_mapped is not None:
        bound = bound.ipv4_mapped
    return bound == node


def socket_owners(inodes: set[int], proc: Path = PROC) -> dict[int, list[int]]:
    """inode -> pids holding it (processes whose fds this user cannot read hold none we can see)."""
    owners: dict[int, list[int]] = {inode: [] for inode in inodes}
    if not inodes:
        return owners
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        for link in links:
            if link in wanted and int(entry.name) not in owners[wanted[link]]:
                owners[wanted[link]].append(int(entry.name))
    return owners


def process_table(proc: Path = PROC) -> dict[int, tuple[int, int, int]]:
    """pid -> (parent pid, process group, start time in clock ticks)."""
    table = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def tree(root: int, root_start: Optional[int], pgid: Optional[int], proc: Path = PROC,
         table: Optional[dict[int, tuple[int, int, int]]] = None) -> set[int]:
    """The root (if it is still the process that was launched), its group, and its descendants.
    `table`: a process_table() already read (checks of several ports share one)."""
    table = process_table(proc) if table is None else table
    if root not in table or (root_start is not None and table[root][2] != root_start):
        return set()
    members = {root} | ({pid for pid, row in table.items() if row[1] == pgid} if pgid else set())
    for pid in table:
        seen, current = set(), pid
        while current in table and current not in seen and current > 1:
            if current in members:
                members.add(pid)
                break
            seen.add(current)
            current = table[current][0]
    return members


def check_listener(request: dict, node_address: str, proc: Path = PROC) -> dict:
    """{"port", "ours": bool, "listeners": [{"address", "pids", "ours"}], "detail": str | None}.
    Ours only when at least one listener is reachable and every reachable one is ours."""
    return check_listeners({"one": request}, node_address, proc)["one"]


def check_listeners(requests: dict[str, dict], node_address: str, proc: Path = PROC) -> dict[str, dict]:
    """check_listener for several requests (by name) on this node, reading /proc once for all."""
    sockets = listening_sockets(proc)
    found = {name: [s for s in sockets.get(int(r["port"]), []) if reachable(s["address"], node_address)]
             for name, r in requests.items()}
    owners = socket_owners({s["inode"] for listeners in found.values() for s in listeners}, proc)
    table = process_table(proc)
    return {name: _verdict(int(r["port"]), found[name], owners, node_address,
                           tree(int(r["pid"]), r.get("start_time"), r.get("pgid"), proc, table))
            for name, r in requests.items()}


def _verdict(port: int, found: list[dict], owners: dict[int, list[int]], node_address: str,
             members: set[int]) -> dict:
    listeners = [{"address": s["address"], "pids": sorted(owners[s["inode"]]),
                  "ours": bool(owners[s["inode"]]) and set(owners[s["inode"]]) <= members} for s in found]
    ours = bool(listeners) and all(s["ours"] for s in listeners)
    detail = None
    if not listeners:
        detail = f"nothing listens on port {port} for {node_address}"
    elif not ours:
        foreign = next(s for s in listeners if not s["ours"])
        who = f"pid {', '.join(map(str, foreign['pids']))}" if foreign["pids"] else "a process this user cannot see"
        detail = f"the listener on {foreign['address']}:{port} belongs to {who}, not to the step's processes"
    return {"port": port, "ours": ours, "listeners": listeners, "detail": detail}
