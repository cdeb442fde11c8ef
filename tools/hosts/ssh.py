"""A remote host over SSH with the same operations as the local host (tools/hosts/local.py).

Commands reach the remote shell only through the pure builders below, which `shlex.quote` every
argument, path and environment value. `run` prints the shell's pid first (sshd makes each command
a session leader, so pid == pgid) and on timeout kills that whole group. Background processes are
started with `setsid nohup ... < /dev/null &` so pid == pgid == sid and the channel closes at once.
Files move over SFTP: uploads are atomic (temp file, chmod, rename), downloads are streamed.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import shlex
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath

import paramiko

from state.engines.process import RunResult
from state.engines.ssh import SSHHostConfig
from tools.errors import ServerError
from tools.hosts.connection import Connection, Prompt, SSHError
from tools.interrupts import Interrupted

PGID_MARK = "__perfloop_pgid__="
LineCallback = Callable[[str, str], None]
"""Called with ("stdout" | "stderr", line without its newline) as a command's output arrives."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ConnectionLost(SSHError):
    """The connection dropped while an operation was under way; the next call reconnects.
    `pgid` is the remote process group of the command that was running, when known."""

    def __init__(self, message: str, pgid: int | None = None) -> None:
        super().__init__(message)
        self.pgid = pgid


def _exports(env: Mapping[str, str] | None) -> str:
    for name in env or {}:
        if not _ENV_NAME.fullmatch(name):
            raise SSHError(f"{name!r} is not a valid environment variable name")
    pairs = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
    return f"export {pairs}; " if pairs else ""


def run_script(argv: Sequence[str], cwd: str | PurePath, env: Mapping[str, str] | None = None) -> str:
    """Shell line that reports its pgid on stderr, then runs `argv` in `cwd` (pure)."""
    return (
        f"echo {PGID_MARK}$$ >&2; cd -- {shlex.quote(str(cwd))} || exit 1; "
        f"{_exports(env)}exec {shlex.join(argv)}"
    )


def kill_script(pgid: int, signal_name: str) -> str:
    """Shell line sending a signal to a whole process group (pure). `kill -s SIG -- -PGID` is
    the POSIX form: dash's builtin rejects `kill -SIG -- -PGID`."""
    return f"kill -s {signal_name} -- -{int(pgid)} 2>/dev/null; true"


PS_SCRIPT = "ps -A -o pid=,pgid=,stat="


def parse_members(ps_output: str, pgid: int) -> list[int]:
    """Pids of `pgid`'s members in `ps -o pid=,pgid=,stat=` output, zombies excluded (pure)."""
    members = []
    for line in ps_output.splitlines():
        fields = line.split()
        if len(fields) >= 3 and int(fields[1]) == pgid and not fields[2].startswith("Z"):
            members.append(int(fields[0]))
    return members


class LineSplitter:
    """Bytes in, complete decoded lines out; the stream's text is kept whole as well."""

    def __init__(self, stream: str, on_line: LineCallback | None) -> None:
        self.stream, self.on_line, self._partial = stream, on_line, b""
        self.chunks: list[str] = []
        self.pgid: int | None = None

    def feed(self, data: bytes) -> None:
        """Add received bytes, calling back for each line they complete."""
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            self._emit(line + b"\n")

    def close(self) -> None:
        """Flush a last line that had no newline."""
        if self._partial:
            self._emit(self._partial)
            self._partial = b""

    def text(self) -> str:
        """Everything received, decoded."""
        return "".join(self.chunks)

    def _emit(self, raw: bytes) -> None:
        line = raw.decode(errors="replace")
        if self.stream == "stderr" and self.pgid is None and line.startswith(PGID_MARK):
            self.pgid = int(line[len(PGID_MARK) :])
            return
        self.chunks.append(line)
        if self.on_line:
            self.on_line(self.stream, line.rstrip("\n"))


class SSHHost:
    """Commands, background process groups and files on a remote host, over one SSH connection."""

    def __init__(self, cfg: SSHHostConfig, prompt: Prompt | None = None) -> None:
        self.cfg = cfg
        self.conn = Connection(cfg, prompt)
        self._sftp: paramiko.SFTPClient | None = None

    def close(self) -> None:
        """Close the SFTP session and the connection."""
        self._sftp = None
        self.conn.close()

    def run(
        self,
        argv: Sequence[str],
        cwd: PurePath | str,
        *,
        timeout_s: float = 600.0,
        env: Mapping[str, str] | None = None,
        on_line: LineCallback | None = None,
    ) -> RunResult:
        """Run a command to completion, streaming its lines; on timeout kill its process group."""
        t0 = time.perf_counter()
        out, err = LineSplitter("stdout", on_line), LineSplitter("stderr", on_line)
        channel = self._session()
        try:
            channel.exec_command(run_script(argv, cwd, env))
            finished = _pump(channel, out, err, time.monotonic() + timeout_s)
            if not finished:
                if err.pgid is not None:
                    self._shell(kill_script(err.pgid, "KILL"))
                _pump(channel, out, err, time.monotonic() + 10)
            if finished and not channel.eof_received:
                raise EOFError("the channel closed before the command's output ended")
            code = channel.recv_exit_status() if finished else -9
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise self._lost(f"running {argv[0]!r}", exc, err.pgid) from exc
        except Interrupted:  # perfloop stops: so does the command it was waiting on
            if err.pgid is not None:
                self._shell(kill_script(err.pgid, "TERM"))
            raise
        finally:
            channel.close()
        out.close()
        err.close()
        stderr = err.text() + ("" if finished else f"\n[perfloop] killed after {timeout_s:.0f}s timeout")
        return RunResult(
            argv=list(argv),
            returncode=code,
            stdout=out.text(),
            stderr=stderr,
            duration_s=time.perf_counter() - t0,
        )

    def group_members(self, pgid: int) -> list[int]:
        """Live (non-zombie) processes of a remote process group."""
        code, out, err = self._shell(PS_SCRIPT)
        if code != 0:
            raise SSHError(f"`ps` failed on {self.conn.endpoint}: {err.strip() or code}")
        return parse_members(out, pgid)

    def stop_group(self, pgid: int, grace_s: float = 10.0) -> bool:
        """SIGTERM the group, wait up to `grace_s`, then SIGKILL. True if SIGKILL was needed."""
        if not self.group_members(pgid):
            return False
        self._shell(kill_script(pgid, "TERM"))
        if self._wait_gone(pgid, grace_s):
            return False
        self._shell(kill_script(pgid, "KILL"))
        if not self._wait_gone(pgid, 10.0):
            raise ServerError(
                f"process group {pgid} on {self.conn.endpoint} survived SIGKILL; "
                f"inspect it with `ps -g {pgid}` there"
            )
        return True

    def write_file_atomic(self, path: PurePath | str, data: bytes | str, mode: int | None = None) -> None:
        """Replace a remote file at once: write `NAME.<random>.tmp`, chmod, rename over NAME.
        `mode` defaults to the existing file's mode (0o644 for a new file)."""
        sftp, target = self.sftp(), str(path)
        if mode is None:
            mode = stat.S_IMODE(sftp.stat(target).st_mode) if self.exists(target) else 0o644
        tmp = f"{target}.{secrets.token_hex(4)}.tmp"
        payload = data.encode() if isinstance(data, str) else data
        try:
            sftp.putfo(io.BytesIO(payload), tmp, file_size=len(payload), confirm=True)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, target)
        except BaseException:
            if self.conn.alive() and self.exists(tmp):
                sftp.remove(tmp)
            raise

    def fetch(
        self, remote: PurePath | str, local: Path, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """Stream a remote file to `local` (via `local.part`), calling `progress(done, total)` per
        chunk; returns the bytes copied."""
        local.parent.mkdir(parents=True, exist_ok=True)
        part = local.with_name(local.name + ".part")
        try:
            with open(part, "wb") as f:
                size = self.sftp().getfo(str(remote), f, callback=progress)
            os.replace(part, local)
        finally:
            part.unlink(missing_ok=True)
        return size

    def exists(self, path: PurePath | str) -> bool:
        """Whether a remote path exists."""
        try:
            self.sftp().stat(str(path))
            return True
        except FileNotFoundError:
            return False

    def makedirs(self, path: PurePath | str) -> None:
        """Create a remote directory and its parents (no error if it exists)."""
        code, _, err = self._shell(f"mkdir -p -- {shlex.quote(str(path))}")
        if code != 0:
            raise SSHError(f"cannot create {path} on {self.conn.endpoint}: {err.strip()}")

    def sftp(self) -> paramiko.SFTPClient:
        """The SFTP session, (re)opened over a live connection."""
        if self._sftp is None or self._sftp.get_channel().closed or not self.conn.alive():
            self._sftp = self.conn.opening(lambda client: client.open_sftp())
        return self._sftp

    def _session(self) -> paramiko.Channel:
        return self.conn.opening(
            lambda client: client.get_transport().open_session(timeout=self.cfg.connect_timeout_s)
        )

    def _shell(self, line: str, timeout_s: float = 60.0) -> tuple[int, str, str]:
        """Run a short shell line of ours; (exit code, stdout, stderr)."""
        result = self.run(["sh", "-c", line], "/", timeout_s=timeout_s)
        return result.returncode, result.stdout, result.stderr

    def _wait_gone(self, pgid: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.group_members(pgid):
                return True
            time.sleep(0.1)
        return not self.group_members(pgid)

    def _lost(self, doing: str, exc: BaseException, pgid: int | None = None) -> ConnectionLost:
        return ConnectionLost(
            f"connection to {self.conn.endpoint} dropped while {doing} "
            f"({exc or type(exc).__name__}); the next call reconnects",
            pgid,
        )


def _pump(channel: paramiko.Channel, out: LineSplitter, err: LineSplitter, deadline: float) -> bool:
    """Move the channel's output into the splitters until the command exits (True) or the
    deadline passes (False)."""
    while True:
        done = (channel.exit_status_ready() and channel.eof_received) or channel.closed
        busy = False
        if channel.recv_ready():
            out.feed(channel.recv(65536))
            busy = True
        if channel.recv_stderr_ready():
            err.feed(channel.recv_stderr(65536))
            busy = True
        if not busy:
            if done:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
