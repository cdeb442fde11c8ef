"""Where an SSH target points: `ssh://user@host:port` or `ssh://ALIAS` resolved through the OpenSSH
client config (HostName, Port, User, IdentityFile, ProxyJump); the SSH errors; the reconnect backoff.
Pure apart from reading the config file; paramiko loads when a config is read (`load_config`)."""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tools.errors import ToolError

if TYPE_CHECKING:
    import paramiko

DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")


class SSHError(ToolError):
    """The remote host could not be reached, or the connection broke."""


class HostKeyError(SSHError):
    """The host's key is unknown or has changed: never retried."""


class SSHAuthError(SSHError):
    """No key was accepted, or a key could not be decrypted: never retried."""


@dataclass(frozen=True)
class Endpoint:
    """One SSH server to authenticate to, as resolved from a URL or jump spec and the config."""

    hostname: str
    port: int
    user: str
    identity_files: tuple[Path, ...]
    jumps: tuple[str, ...] = ()

    @property
    def known_hosts_name(self) -> str:
        """The name this host's key is recorded under in known_hosts."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"


def parse_target(spec: str) -> tuple[str | None, str, int | None]:
    """(user, host, port) of `ssh://[user@]host[:port]` or a bare `[user@]host[:port]` (pure)."""
    parts = urlsplit(spec if spec.startswith("ssh://") else f"ssh://{spec}")
    if not parts.hostname or parts.path not in ("", "/"):
        raise SSHError(f"{spec!r} is not an SSH address: write ssh://user@host:port or ssh://ALIAS")
    try:
        port = parts.port
    except ValueError:
        raise SSHError(f"{spec!r} has an invalid port") from None
    return parts.username, parts.hostname, port


def resolve(spec: str, config: paramiko.SSHConfig, *, follow_jumps: bool = True) -> Endpoint:
    """Endpoint of `spec`, with the config's settings for its host name (pure given `config`).

    Values written in the spec win over the config's, as with `ssh`. Jump hosts are resolved
    with `follow_jumps=False`: a chain is written as a comma-separated ProxyJump.
    """
    user, host, port = parse_target(spec)
    found = config.lookup(host)
    files = tuple(Path(os.path.expanduser(p)) for p in found.get("identityfile", []))
    jump = found.get("proxyjump", "none") if follow_jumps else "none"
    return Endpoint(
        hostname=found.get("hostname", host),
        port=port or int(found.get("port", 22)),
        user=user or found.get("user") or getpass.getuser(),
        identity_files=files or tuple(Path.home() / ".ssh" / n for n in DEFAULT_KEYS),
        jumps=() if jump == "none" else tuple(j.strip() for j in jump.split(",")),
    )


def load_config(path: Path | None) -> paramiko.SSHConfig:
    """The OpenSSH client config at `path` (default ~/.ssh/config; empty when absent)."""
    import paramiko

    path = path or Path.home() / ".ssh" / "config"
    if path.is_file():
        return paramiko.SSHConfig.from_path(str(path))
    if path != Path.home() / ".ssh" / "config":
        raise SSHError(f"SSH config {path} does not exist: fix config_file or remove it")
    return paramiko.SSHConfig()


def backoff_delays(tries: int, base_s: float, cap_s: float = 10.0) -> list[float]:
    """Sleeps between `tries` attempts: base, 2*base, 4*base, ... capped at `cap_s` (pure)."""
    return [min(cap_s, base_s * 2**i) for i in range(max(0, tries - 1))]
