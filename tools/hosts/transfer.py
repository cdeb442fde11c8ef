"""Door tools that move files between this machine and an SSH host; they always run here.
paramiko and the connection load when a transfer runs, not with the graph that names these tools."""

from __future__ import annotations

import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from state.door.calls import Done, FetchArgs, PathArgs, PushTreeArgs
from tools.door import tool
from tools.errors import ToolError
from tools.progress import report

if TYPE_CHECKING:
    from tools.hosts.ssh import SSHHost

T = TypeVar("T")


DROP_NOTICE_S = 2.0
"""How long a transport may still look alive after its connection went away."""


def dropped(host: SSHHost, exc: BaseException) -> bool:
    """Whether `exc` means the connection to the host went away.

    SFTP reports a killed connection (EOF on its channel) before the transport's thread notices, so
    the transport can look alive for a moment: those errors always count as a drop; any other
    OSError (e.g. a local disk error) only once the transport is seen down."""
    import paramiko

    from tools.hosts.ssh import ConnectionLost

    if isinstance(exc, ConnectionLost | paramiko.SSHException | EOFError):
        return True
    deadline = time.monotonic() + DROP_NOTICE_S
    while host.conn.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not host.conn.alive()


def once_more_after_a_drop(host: SSHHost, action: Callable[[], T]) -> T:
    """Run an idempotent transfer; if the connection drops during it, reconnect and run it again."""
    import paramiko

    from tools.hosts.ssh import ConnectionLost

    try:
        return action()
    except FileNotFoundError:
        raise
    except (ConnectionLost, paramiko.SSHException, EOFError, OSError) as exc:
        if not dropped(host, exc):
            raise
    host.conn.reconnect()
    return action()


@tool("host.fetch", where="local")
def fetch(args: FetchArgs) -> PathArgs:
    """Copy a remote file, or every file of a remote folder, to `local` (streamed, with progress)."""
    from tools.hosts.connect import connect

    host = connect(args.host)
    return once_more_after_a_drop(host, lambda: _fetch(host, args))


def _fetch(host: SSHHost, args: FetchArgs) -> PathArgs:
    sftp = host.sftp()
    try:
        if stat.S_ISDIR(sftp.stat(str(args.remote)).st_mode):
            pairs = [
                (args.remote / a.filename, args.local / a.filename)
                for a in sftp.listdir_attr(str(args.remote))
                if stat.S_ISREG(a.st_mode or 0)
            ]
        else:
            pairs = [(args.remote, args.local)]
    except FileNotFoundError:
        raise ToolError(
            f"{args.remote} does not exist on {host.conn.endpoint}; check the session's host folder there"
        ) from None
    for remote, local in pairs:
        host.fetch(remote, local, _progress(f"fetching {remote.name} from {host.conn.endpoint}"))
    return PathArgs(path=args.local)


def _progress(what: str) -> Callable[[int, int], None]:
    """A progress callback reporting `what: done/total KiB`."""

    def show(done: int, total: int) -> None:
        report(f"{what}: {done >> 10}/{total >> 10} KiB")

    return show


@tool("host.push_tree", where="local")
def push_tree(args: PushTreeArgs) -> Done:
    """Upload a source tree (files replaced atomically, modes kept; no __pycache__ or .git)."""
    from tools.hosts.connect import connect

    host = connect(args.host)
    return once_more_after_a_drop(host, lambda: _push_tree(host, args))


def _push_tree(host: SSHHost, args: PushTreeArgs) -> Done:
    files = [
        p
        for p in sorted(args.src.rglob("*"))
        if p.is_file() and not {"__pycache__", ".git"} & set(p.relative_to(args.src).parts)
    ]
    if not files:
        raise ToolError(f"{args.src} has no files to upload")
    folders = sorted({str(args.dest / p.relative_to(args.src).parent) for p in files})
    made = host.run(["mkdir", "-p", "--", *folders], "/")
    if made.returncode != 0:
        raise ToolError(f"cannot create {args.dest} on {host.conn.endpoint}: {made.stderr.strip()}")
    for p in files:
        report(f"uploading {p.relative_to(args.src)} to {host.conn.endpoint}")
        host.write_file_atomic(
            args.dest / p.relative_to(args.src), p.read_bytes(), stat.S_IMODE(p.stat().st_mode)
        )
    _remove_partial_writes(host, args.dest, {str(args.dest / p.relative_to(args.src)) for p in files})
    return Done(note=f"uploaded {len(files)} files to {args.dest}")


_PARTIAL = re.compile(r"^(.*)\.[0-9a-f]{8}\.tmp$")


def _remove_partial_writes(host: SSHHost, dest: Path, uploaded: set[str]) -> None:
    """Remove the temporary files (`NAME.<hex8>.tmp`) of uploads a dropped connection cut short."""
    found = host.run(["find", str(dest), "-type", "f", "-name", "*.tmp"], "/").stdout.splitlines()
    stale = [path for path in found if (m := _PARTIAL.match(path)) and m.group(1) in uploaded]
    if stale:
        host.run(["rm", "-f", "--", *stale], "/")
