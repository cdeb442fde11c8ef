"""The local host: commands as subprocesses, each in its own session and process group.

A background process is started with `start_new_session=True` (pid == pgid == sid), its output sent
to a log file, stdin from /dev/null, so it survives perfloop and can be stopped as a group. Liveness
ignores zombies: a group is alive while one of its members is not in state Z. A server carries a
mark in its environment (`MARK_ENV`), which every process it starts inherits; `stop_marked` finds
them all in /proc/*/environ (Linux), whatever group they moved to and whether or not perfloop
lived to record their pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from state.base import utcnow
from state.engines.process import ProcessHandle, RunResult
from tools.errors import ServerError
from tools.interrupts import Interrupted

MARK_ENV = "PERFLOOP_SERVER"
"""The variable marking a server's processes with the launch that started them (tools/server.py)."""

# Popen objects of children started by this process, so their exit codes can be read and reaped.
_CHILDREN: dict[int, subprocess.Popen] = {}


def run(
    argv: Sequence[str], cwd: Path, *, timeout_s: float = 600.0, env: Mapping[str, str] | None = None
) -> RunResult:
    """Run a command to completion; on timeout kill its whole process group."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\n[perfloop] killed after {timeout_s:.0f}s timeout"
    except Interrupted:  # perfloop stops: so does the command it was waiting on
        _signal_group(proc.pid, signal.SIGTERM)
        proc.wait()
        raise
    return RunResult(
        argv=list(argv),
        returncode=proc.returncode,
        stdout=out,
        stderr=err,
        duration_s=time.perf_counter() - t0,
    )


def start_background(
    argv: Sequence[str],
    cwd: Path,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    *,
    inherit: bool = True,
) -> ProcessHandle:
    """Start a long-running process in its own session, output appended to `log_path`; its
    environment is ours plus `env`, or exactly `env` when `inherit` is False."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=_env(env) if inherit else dict(env or {}),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise ServerError(f"cannot start {argv[0]!r} in {cwd}: {exc.strerror}") from exc
    _CHILDREN[proc.pid] = proc
    return ProcessHandle(pid=proc.pid, pgid=proc.pid, log_path=log_path, started_at=utcnow())


def exit_code(pid: int) -> int | None:
    """Exit code of a child of this process that has exited; None if running or not ours."""
    proc = _CHILDREN.get(pid)
    return None if proc is None else proc.poll()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    for proc in list(_CHILDREN.values()):
        proc.poll()  # reap our own exited children so they do not linger as zombies
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def stop_group(pgid: int, grace_s: float = 10.0) -> bool:
    """SIGTERM the group, wait up to `grace_s`, then SIGKILL. True if SIGKILL was needed."""
    if not group_members(pgid):
        return False
    _signal_group(pgid, signal.SIGTERM)
    if _wait_gone(pgid, grace_s):
        return False
    _signal_group(pgid, signal.SIGKILL)
    if not _wait_gone(pgid, 10.0):
        raise ServerError(f"process group {pgid} survived SIGKILL; inspect it with `ps -g {pgid}`")
    return True


def marked(select: Callable[[str], bool]) -> dict[int, int]:
    """pid -> pgid of each live process whose environment's MARK_ENV value `select` accepts
    (processes we may not read, and zombies, whose environment is empty, are not listed)."""
    needle = f"{MARK_ENV}=".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            variables = (entry / "environ").read_bytes().split(b"\0") if entry.name.isdigit() else []
            mark = next((v[len(needle) :] for v in variables if v.startswith(needle)), None)
            if mark is not None and select(mark.decode(errors="replace")):
                found[int(entry.name)] = os.getpgid(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def stop_marked(select: Callable[[str], bool], grace_s: float = 10.0) -> list[int]:
    """Stop the process group of every process `marked(select)` finds, all at once (SIGTERM, up
    to `grace_s`, SIGKILL), and what is still marked after; returns the pids found."""
    found = marked(select)
    groups = set(found.values()) - {os.getpgid(0)}  # never our own group
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        for pgid in groups:
            _signal_group(pgid, sig)
        deadline = time.monotonic() + wait_s
        while (groups := {g for g in groups if group_members(g)}) and time.monotonic() < deadline:
            time.sleep(0.05)
    for pid in marked(select):  # one that left its group after the scan
        if pid != os.getpid():
            _signal(pid, signal.SIGKILL)
    return sorted(found)


def tail(path: Path, lines: int = 20, since: int = 0) -> str:
    """Last lines of a log file ('' if missing), of what was written from byte `since` on (a
    launch's own lines in a log an earlier attempt of the same launch appended to)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(since, f.tell() - 16384))
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def _wait_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return True
        time.sleep(0.05)
    return not group_members(pgid)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    return env


# File operations, so that this module satisfies tools.hosts.connect.Host like an SSH host does.


def read_file(path: Path) -> bytes:
    """A file's content (FileNotFoundError if missing)."""
    return Path(path).read_bytes()


def write_file_atomic(path: Path, data: bytes | str, mode: int | None = None) -> None:
    """Replace a file at once (a temp file beside it, then rename); mode defaults to the old
    file's (0o644 for a new one)."""
    path = Path(path)
    if mode is None:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
        tmp.chmod(mode)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def fetch(remote: Path, local: Path, progress: Callable[[int, int], None] | None = None) -> int:
    """Copy a file (the local host's "remote" is itself); `progress(done, total)` at the end."""
    Path(local).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(remote, local)
    size = Path(local).stat().st_size
    if progress:
        progress(size, size)
    return size


def exists(path: Path) -> bool:
    """Whether a path exists."""
    return Path(path).exists()


def makedirs(path: Path) -> None:
    """Create a directory and its parents (no error if it exists)."""
    Path(path).mkdir(parents=True, exist_ok=True)
