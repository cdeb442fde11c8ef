"""Sessions whose target lives on an SSH host: the connection, the executor, where files go there."""

from __future__ import annotations

import getpass
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from state.config.target import TargetConfig
from tools.hosts.client import RemoteExecutor, ensure_package, remote_home
from tools.hosts.connect import close_all, connect
from tools.hosts.connection import Prompt
from tools.hosts.setup import ensure_env
from tools.hosts.ssh import SSHHost


def ssh_prompt() -> Prompt | None:
    """Ask for a key passphrase at the terminal, only when there is one."""
    return getpass.getpass if sys.stdin.isatty() else None


def consent(question: str) -> bool:
    """Ask the user at the terminal (never without one)."""
    print(question, file=sys.stderr)
    print("[y/N] ", end="", file=sys.stderr, flush=True)  # stdout may be --json's one document
    return input().strip().lower() in ("y", "yes")


def first_use(host: SSHHost, python: str) -> None:
    """With a terminal: offer `perfloop host setup` when the host's Python cannot run perfloop's
    tools (without one, the first tool call says what to run)."""
    if sys.stdin.isatty():
        ensure_env(host, python, consent)


def remote_base(target: TargetConfig) -> Path:
    """perfloop's folder on the target's SSH host: `~/.perfloop` there (absolute)."""
    if target.host.kind != "ssh":
        raise ValueError(f"remote_base needs an SSH target, not a {target.host.kind} one")
    return Path(remote_home(connect(target.host, ssh_prompt()))) / ".perfloop"


def remote_options(target: TargetConfig, session_id: str) -> dict:
    """Session options an SSH target sets: the host's interpreter and the session's folder there."""
    if target.host.kind != "ssh":
        return {}
    return {"python": target.host.python, "host_dir": remote_base(target) / "sessions" / session_id}


@contextmanager
def executor_for(target: TargetConfig, session_dir: Path) -> Iterator[RemoteExecutor | None]:
    """The executor running host tools on the target's SSH host (None for the local host); the
    connection is closed when the block ends. Reconnects are logged to `session_dir/remote.log`."""
    if target.host.kind != "ssh":
        yield None
        return
    try:
        host = connect(target.host, ssh_prompt())
        first_use(host, target.host.python)
        yield RemoteExecutor(host, target.host.python, ensure_package(host), session_dir / "remote.log")
    finally:
        close_all()


def host_executors(session_dir: Path) -> Callable[[Any], RemoteExecutor | None]:
    """Makes the executor for a host config of the target's `[[hosts]]` (None for a local one),
    connected on first use; `close_hosts` closes them."""

    def make(cfg: Any) -> RemoteExecutor | None:
        if getattr(cfg, "kind", "local") != "ssh":
            return None
        host = connect(cfg, ssh_prompt())
        first_use(host, cfg.python)
        return RemoteExecutor(host, cfg.python, ensure_package(host), session_dir / "remote.log")

    return make


def close_hosts() -> None:
    """Close every SSH connection this process opened."""
    close_all()
