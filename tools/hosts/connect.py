"""One shared SSH connection per host config in a process."""

from __future__ import annotations

from state.engines.ssh import SSHHostConfig
from tools.hosts.connection import Prompt
from tools.hosts.ssh import SSHHost

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
