"""Who listens on a TCP port, from /proc (Linux): proof that a health answer came from our server.

`/proc/net/tcp` and `/proc/net/tcp6` list listening sockets (state 0A) with their port and inode;
`/proc/<pid>/fd/*` links read `socket:[INODE]`. A port belongs to a process group when one of the
group's processes holds one of the port's listening sockets.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from pathlib import Path

LISTEN = "0A"


def parse_listeners(table: str, port: int) -> set[int]:
    """Inodes of the listening sockets on `port` in a /proc/net/tcp[6] table (pure)."""
    inodes = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(int(fields[9]))
    return inodes


def listening_inodes(port: int) -> set[int]:
    """Inodes of this network namespace's listening TCP sockets on `port`."""
    found: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            found |= parse_listeners(Path("/proc/net", name).read_text(), port)
        except OSError:
            continue
    return found


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Inodes of the sockets the given processes hold open (those we may read)."""
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                found.add(int(link[8:-1]))
    return found


def holders(port: int) -> list[int]:
    """Pids (that we may inspect) holding a listening socket on `port`."""
    inodes = listening_inodes(port)
    pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    return [pid for pid in pids if socket_inodes([pid]) & inodes] if inodes else []


def owned_by(port: int, pids: Iterable[int]) -> bool | None:
    """Whether one of `pids` listens on `port`: None when no listener is visible here (another
    network namespace, e.g. a container's published port), so ownership cannot be told."""
    inodes = listening_inodes(port)
    if not inodes:
        return None
    return bool(inodes & socket_inodes(pids))


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP port cannot be bound now (something listens on it)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return bool(listening_inodes(port))
