"""The per-session lock: a lease row in the session store, so it holds across every machine that
shares the store (SQLite under one $PERFLOOP_HOME, or one PostgreSQL database).

A holder takes the row for `ttl` seconds (`$PERFLOOP_LEASE_SECONDS`, default 60) and a daemon
thread renews it every third of that while the session runs; a clean exit deletes it. A holder that
dies (SIGKILL, a machine gone) stops renewing, and its lease expires by the database's clock, so it
never blocks a session forever. A holder on this very machine (same `$PERFLOOP_HOME/machine-id`)
whose process is gone is taken over at once, without waiting for the expiry: a crash here, then
`perfloop resume` here, goes on immediately as it did with the old file lock.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools.errors import StoreUnreachable, ToolError
from tools.store.db import Db

LEASE_ENV = "PERFLOOP_LEASE_SECONDS"


class SessionBusy(ToolError):
    """Another perfloop process (here or on another machine) is running this session."""


def lease_seconds() -> float:
    raw = os.environ.get(LEASE_ENV, "60")
    try:
        ttl = float(raw)
    except ValueError:
        ttl = 0
    if not ttl >= 1:
        raise ToolError(f"{LEASE_ENV} must be a number of seconds >= 1, not {raw!r}")
    return ttl


def machine_id(home: Path) -> str:
    """This perfloop home's machine identity (made once, kept in `home/machine-id`)."""
    path = home / "machine-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        value = uuid.uuid4().hex[:12]
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(value)
        os.replace(tmp, path)
        return path.read_text().strip()


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks (tells a reused pid apart), None if gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _holder_dead_here(holder: str, here: str) -> bool:
    mid, pid, ticks = [*holder.split(":"), "", "", ""][:3]
    return mid == here and pid.isdigit() and _start_ticks(int(pid)) != ticks


def dead_here(holder: str, home: Path) -> bool:
    """Whether a lease's holder ran on this machine (`home`'s machine-id) and its process is gone:
    a SIGKILLed session before its lease expires, running no longer."""
    try:
        here = (home / "machine-id").read_text().strip()
    except OSError:  # no session ever held a lease from this home
        return False
    return _holder_dead_here(holder, here)


@contextmanager
def hold(db: Db, session_id: str, home: Path) -> Iterator[None]:
    """Hold the session's lease while the block runs; SessionBusy if someone else holds it."""
    ttl, here = lease_seconds(), machine_id(home)
    me = f"{here}:{os.getpid()}:{_start_ticks(os.getpid())}"
    with db.transaction():
        db.serialize(f"lease:{session_id}")
        rows = db.rows(
            f"SELECT holder, host, pid, expires_at - {db.now} FROM session_leases WHERE session_id = ?",
            (session_id,),
        )
        if rows and rows[0][3] > 0 and rows[0][0] != me and not _holder_dead_here(rows[0][0], here):
            holder, host, pid, left = rows[0]
            elsewhere = (
                "" if holder.startswith(f"{here}:") else f": its lease then expires within {left:.0f} s"
            )
            raise SessionBusy(
                f"session {session_id} is already being run by perfloop process {pid} on {host}; "
                f"wait for it to finish (or end that process{elsewhere})"
            )
        db.run(
            f"INSERT INTO session_leases VALUES (?, ?, ?, ?, {db.now} + ?) ON CONFLICT (session_id) DO "
            "UPDATE SET holder = excluded.holder, host = excluded.host, pid = excluded.pid, "
            "expires_at = excluded.expires_at",
            (session_id, me, socket.gethostname(), os.getpid(), ttl),
        )
    stop = threading.Event()
    beat = threading.Thread(target=_renew, args=(db, session_id, me, ttl, stop), daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()
        try:
            db.run("DELETE FROM session_leases WHERE session_id = ? AND holder = ?", (session_id, me))
        except StoreUnreachable:  # the lease runs out by itself (at once for a resume on this machine)
            pass


def _renew(db: Db, session_id: str, me: str, ttl: float, stop: threading.Event) -> None:
    while not stop.wait(ttl / 3):
        try:
            db.run(
                f"UPDATE session_leases SET expires_at = {db.now} + ? WHERE session_id = ? AND holder = ?",
                (ttl, session_id, me),
            )
        except Exception:  # a store hiccup: the next beat tries again before the lease runs out
            continue
