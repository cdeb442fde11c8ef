"""The host interface shared by the local machine and SSH hosts, and the factory choosing one.

`tools.host` (the module: local subprocesses and files) and `tools.ssh_host.SSHHost` both satisfy
`Host`, so a tool written against it runs the same on either. Remote paths are POSIX paths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from state.process import ProcessHandle, RunResult
from state.ssh import SSHHostConfig
from state.target import LocalHost
from tools import host as local_host
from tools.ssh import Prompt
from tools.ssh_host import SSHHost


@runtime_checkable
class Host(Protocol):
    """Commands, process groups and files on one machine."""

    def run(self, argv: Sequence[str], cwd: Path, *, timeout_s: float = 600.0,
            env: Mapping[str, str] | None = None) -> RunResult:
        """Run a command to completion; on timeout kill its whole process group."""

    def start_background(self, argv: Sequence[str], cwd: Path, log_path: Path,
                         env: Mapping[str, str] | None = None) -> ProcessHandle:
        """Start a process in its own session (pid == pgid), output appended to `log_path`."""

    def group_members(self, pgid: int) -> list[int]:
        """Live (non-zombie) processes of a process group."""

    def stop_group(self, pgid: int, grace_s: float = 10.0) -> bool:
        """SIGTERM the group, wait up to `grace_s`, then SIGKILL. True if SIGKILL was needed."""

    def tail(self, path: Path, lines: int = 20) -> str:
        """Last lines of a text file ('' if missing)."""

    def read_file(self, path: Path) -> bytes:
        """A file's content (FileNotFoundError if missing)."""

    def write_file_atomic(self, path: Path, data: bytes | str, mode: int | None = None) -> None:
        """Replace a file at once (temp file + rename); mode defaults to the old file's."""

    def fetch(self, remote: Path, local: Path,
              progress: Callable[[int, int], None] | None = None) -> int:
        """Copy a file of this host to a local path, reporting (bytes done, total)."""

    def exists(self, path: Path) -> bool:
        """Whether a path exists."""

    def makedirs(self, path: Path) -> None:
        """Create a directory and its parents (no error if it exists)."""


def host_for(spec: LocalHost | SSHHostConfig, prompt: Prompt | None = None) -> Host:
    """The host a config names: the local machine, or a (lazily connected) SSH host. `prompt`
    asks for a key passphrase when the config names no variable holding it."""
    if isinstance(spec, SSHHostConfig):
        return SSHHost(spec, prompt)
    return local_host  # type: ignore[return-value]  # a module satisfying the protocol


_connected: dict[str, SSHHost] = {}


def connect(cfg: SSHHostConfig, prompt: Prompt | None = None) -> SSHHost:
    """The SSH host a config names, shared by every tool of this process (one connection)."""
    key = cfg.model_dump_json()
    if key not in _connected:
        _connected[key] = SSHHost(cfg, prompt)
    return _connected[key]


def close_all() -> None:
    """Close every connection `connect` opened."""
    while _connected:
        _connected.popitem()[1].close()
