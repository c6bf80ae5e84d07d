"""Who listens on a port, checked on the node itself (standard library only).

A listening socket is found in /proc/net/tcp and tcp6 (state 0A) by its local port and address;
its owners are the processes holding `socket:[INODE]` among their /proc/PID/fd links. A listener
is ours when every owner belongs to the step's process tree: the launched process (same pid and
start time, so not a reused pid), its process group (the task Slurm started leads one), and every
descendant by parent pid. Only listeners a connection to one of the node's addresses (every one
its name resolves to, IPv4 and IPv6) could reach count: those bound to that address, to a
wildcard, or to its IPv4-mapped IPv6 form; with no address known, every listener on the port.

Processes open and close fds and exit while the scan reads /proc: an fd or a process gone
mid-read is skipped, an owner gone before its stat is read is dropped, and a verdict of "not
ours" is read again (up to SCANS whole scans): it is never concluded from one partial read.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional, Union

from dd_slurm.runtime.node.procfs import Row, descendants, process_table

LISTEN = "0A"
PROC = Path("/proc")
SCANS = 3  # whole scans before "not ours" stands
RESCAN_PAUSE_S = 0.01
Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Listdir = Callable[[Path], list[str]]


def parse_hex_address(text: str) -> Address:
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


def node_addresses(name: str) -> list[str]:
    """Every address a connection to `name` may go to (IPv4 and IPv6, resolver order); [] when
    it does not resolve."""
    import _socket

    try:
        infos = _socket.getaddrinfo(name, None, 0, _socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]).partition("%")[0] for info in infos))


def _plain(address: str) -> Address:
    """The address without a zone index, an IPv4-mapped IPv6 one as its IPv4 form."""
    parsed = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


def reachable(listener_address: str, node_address: str) -> bool:
    """Would a connection to node_address reach a socket bound to listener_address?"""
    bound = _plain(listener_address)
    return bound.is_unspecified or bound == _plain(node_address)


def reachable_from_any(listener_address: str, addresses: Sequence[str]) -> bool:
    """Would a connection to any of `addresses` reach it (with none known: assume so)?"""
    return not addresses or any(reachable(listener_address, address) for address in addresses)


def fd_links(pid_dir: Path, listdir: Listdir = os.listdir) -> list[str]:
    """The targets of a process's fd links; a process gone (or not this user's) has none, and an
    fd closed between the listing and its readlink is skipped, not the whole process."""
    try:
        names = listdir(pid_dir / "fd")
    except OSError:
        return []
    links = []
    for name in names:
        try:
            links.append(os.readlink(pid_dir / "fd" / name))
        except OSError:
            continue
    return links


def socket_owners(inodes: set[int], proc: Path = PROC, listdir: Listdir = os.listdir) -> dict[int, list[int]]:
    """inode -> pids holding it (processes whose fds this user cannot read hold none we can see)."""
    owners: dict[int, list[int]] = {inode: [] for inode in inodes}
    if not inodes:
        return owners
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    for name in listdir(proc):
        if not name.isdigit():
            continue
        for link in fd_links(proc / name, listdir):
            if link in wanted and int(name) not in owners[wanted[link]]:
                owners[wanted[link]].append(int(name))
    return owners


def tree(root: int, root_start: Optional[int], pgid: Optional[int], proc: Path = PROC,
         table: Optional[dict[int, Row]] = None) -> set[int]:
    """The root (if it is still the process that was launched), its group, and its descendants.
    `table`: a process_table() already read (checks of several ports share one)."""
    table = process_table(proc) if table is None else table
    if root not in table or (root_start is not None and table[root]["start_time"] != root_start):
        return set()
    members = {root} | ({pid for pid, row in table.items() if row["pgid"] == pgid} if pgid else set())
    return members | descendants({pid for pid in members if pid > 1}, table)  # init's children are not the step's


def live_owners(owners: dict[int, list[int]], table: dict[int, Row],
                proc: Path = PROC) -> dict[int, list[int]]:
    """The owners without those that exited between the fd scan and the process table (they hold
    nothing now); one still there whose stat could not be read stays, and is not ours."""
    return {inode: [pid for pid in pids if pid in table or (proc / str(pid)).exists()]
            for inode, pids in owners.items()}


def check_listener(request: dict, addresses: Union[str, Sequence[str]], proc: Path = PROC) -> dict:
    """{"port", "ours": bool, "listeners": [{"address", "pids", "ours"}], "detail": str | None}.
    Ours only when at least one listener is reachable and every reachable one is ours."""
    return check_listeners({"one": request}, addresses, proc)["one"]


def check_listeners(requests: dict[str, dict], addresses: Union[str, Sequence[str]], proc: Path = PROC,
                    listdir: Listdir = os.listdir) -> dict[str, dict]:
    """check_listener for several requests (by name) on this node, reading /proc once for all;
    a request not found ours is read again, up to SCANS scans in all (its last answer stands)."""
    wanted = [addresses] if isinstance(addresses, str) else list(addresses)
    answers: dict[str, dict] = {}
    for scan in range(SCANS):
        if scan:
            time.sleep(RESCAN_PAUSE_S)
        pending = {name: r for name, r in requests.items() if not answers.get(name, {}).get("ours")}
        answers.update(scan_listeners(pending, wanted, proc, listdir))
        if all(answer["ours"] for answer in answers.values()):
            break
    return {name: answers[name] for name in requests}


def scan_listeners(requests: dict[str, dict], addresses: list[str], proc: Path = PROC,
                   listdir: Listdir = os.listdir) -> dict[str, dict]:
    """One scan: the tables, the owners of the reachable listeners, then the process table (read
    last, so a process that started during the scan is in it)."""
    sockets = listening_sockets(proc)
    found = {name: [s for s in sockets.get(int(r["port"]), []) if reachable_from_any(s["address"], addresses)]
             for name, r in requests.items()}
    owners = socket_owners({s["inode"] for listeners in found.values() for s in listeners}, proc, listdir)
    table = process_table(proc)
    owners = live_owners(owners, table, proc)
    return {name: _verdict(int(r["port"]), found[name], owners, addresses,
                           tree(int(r["pid"]), r.get("start_time"), r.get("pgid"), proc, table))
            for name, r in requests.items()}


def _verdict(port: int, found: list[dict], owners: dict[int, list[int]], addresses: list[str],
             members: set[int]) -> dict:
    listeners = [{"address": s["address"], "pids": sorted(owners[s["inode"]]),
                  "ours": bool(owners[s["inode"]]) and set(owners[s["inode"]]) <= members} for s in found]
    ours = bool(listeners) and all(s["ours"] for s in listeners)
    detail = None
    if not listeners:
        detail = f"nothing listens on port {port} for {', '.join(addresses) or 'this node'}"
    elif not ours:
        foreign = next(s for s in listeners if not s["ours"])
        who = f"pid {', '.join(map(str, foreign['pids']))}" if foreign["pids"] else "a process this user cannot see"
        detail = f"the listener on {foreign['address']}:{port} belongs to {who}, not to the step's processes"
    return {"port": port, "ours": ours, "listeners": listeners, "detail": detail}
