"""Values about processes and servers that cross the tool boundary."""

from datetime import datetime
from pathlib import Path

from state.base import Model


class RunResult(Model):
    """Outcome of a command run to completion on a host."""

    argv: list[str]
    """The command that ran."""
    returncode: int
    """Exit status (negative: killed by that signal)."""
    stdout: str
    """Standard output (text)."""
    stderr: str
    """Standard error (text)."""
    duration_s: float
    """Wall time of the command."""


class ProcessHandle(Model):
    """A background process started in its own session (pid == pgid == sid)."""

    pid: int
    """Process id."""
    pgid: int
    """Process group id; stop signals go to the whole group."""
    log_path: Path
    """File receiving the process's stdout and stderr."""
    started_at: datetime
    """When it was started."""


class ServerHandle(Model):
    """A running target server launched by perfloop."""

    process: ProcessHandle
    """The server's process (group)."""
    base_url: str
    """Base URL, e.g. http://127.0.0.1:30000."""
    port: int
    """TCP port it listens on."""
    health_path: str = "/health"
    """Path that answers 200 while the server can serve."""
    tree_sha256: str
    """Fingerprint of the working tree it was launched from (HEAD + uncommitted changes)."""
    instrumented: bool
    """Whether the dormant profiler instrumentation was in the tree at launch."""
    profile_dir: Path | None = None
    """PERFLOOP_PROFILE_DIR given to the server (patch profiling method), if any."""
    launch_number: int
    """1 for the session's first launch, 2 for the next, ..."""
    pid_file: Path | None = None
    """The pid file written at spawn (removed when stopped)."""
    startup_s: float
    """Seconds from start to healthy."""
    launch_argv: list[str] = []
    """The launch command as configured ({port}, {python} not substituted); empty in sessions
    recorded before it was kept."""


class MarkedArgs(Model):
    """The servers one session started on a host, found by the mark in their environment."""

    folder: Path
    """The session's folder on that host: every server launched for a pid file under it."""
    keep: str | None = None
    """The mark of the one server left running (the recorded one a resumed session checks)."""
    grace_s: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""


class StoppedServers(Model):
    """What a sweep of marked servers found."""

    pids: list[int]
    """The processes it stopped (none: nothing of the session ran there)."""
