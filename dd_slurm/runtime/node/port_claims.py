"""Claims on automatic ports, node-wide (runs on the nodes; standard library only).

A launcher chooses a free port, and its server binds it a moment (or a model load) later. Two
launchers on one node (replicas of one attempt, or of attempts side by side) can choose the same
free port in between, and the later server fails with "Address already in use" while the earlier
one's listener is not its own. So a launcher claims the port it chooses: a file per port in one
node-wide directory, locked (flock) by an inheritable descriptor that the server keeps across
exec. The claim holds while the server, or any child that inherited it, lives, and ends with
them: no claim outlives its processes, whatever killed them. A port whose claim is held by a
live process is not chosen. Claims are a courtesy between launchers: where the directory cannot be
used (absent /dev/shm, a symlink, not sticky), ports are chosen without them."""

from __future__ import annotations

import fcntl
import os
import stat

CLAIMS_DIR = "/dev/shm/dd-slurm-ports"
HELD: list[int] = []  # this launcher's claim descriptors: kept open, and inherited by the program it execs


def usable(folder: str) -> bool:
    """The claims directory, made if absent: a real directory, sticky (1777: every user's launchers
    claim there, none can remove another's claim)."""
    try:
        os.mkdir(folder, 0o1777)
        os.chmod(folder, 0o1777)  # noqa: S103 -- shared like /tmp, sticky; the umask took mkdir's bits
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and bool(info.st_mode & stat.S_ISVTX)


def claim(port: int, folder: str = CLAIMS_DIR) -> bool:
    """Claim `port` for this process and what it execs: False when a live process holds it. Without
    a usable directory every port counts as claimed by us (nothing to coordinate with)."""
    if not usable(folder):
        return True
    path = os.path.join(folder, str(port))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return True  # another user's claim file we cannot open: its lock says nothing we can read
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    os.set_inheritable(fd, True)
    HELD.append(fd)
    return True

