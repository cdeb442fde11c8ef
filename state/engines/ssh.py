"""A remote host reached over SSH: where it is and how its identity and keys are checked.

No secret ever lives here: a key's passphrase is read at connect time from the environment
variable named by `passphrase_env` (or asked at a prompt) and is never stored.
"""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from state.base import Model


class SSHHostConfig(Model):
    """A remote host, e.g. `ssh://root@gpu-box:2222` or `ssh://ALIAS` from ~/.ssh/config."""

    kind: Literal["ssh"] = "ssh"
    """Discriminator of the host variant."""
    url: str
    """`ssh://[user@]host[:port]`; a bare host is looked up as an alias in the SSH config."""
    trust_new_host: bool = False
    """Record an unknown host key into known_hosts instead of refusing it (a changed key is
    refused regardless)."""
    passphrase_env: str | None = None
    """Name of the environment variable holding the private key's passphrase (not the value)."""
    known_hosts: Path | None = None
    """known_hosts file to check and record host keys in; default ~/.ssh/known_hosts."""
    config_file: Path | None = None
    """OpenSSH client config to honour (HostName, Port, User, IdentityFile, ProxyJump); default
    ~/.ssh/config when it exists."""
    connect_timeout_s: float = Field(15.0, gt=0)
    """Seconds allowed for the TCP connection, banner and authentication of each hop."""
    keepalive_s: int = Field(15, ge=0)
    """Seconds between SSH keepalive packets (0: none)."""
    python: str = "python3"
    """Interpreter on the host that runs perfloop's tools and `{python}` in launch commands; it
    needs pydantic, GitPython, msgspec and regex (and what the server needs, e.g. torch)."""

    @field_validator("url")
    @classmethod
    def _ssh_scheme(cls, url: str) -> str:
        """Refuse anything but an ssh:// URL."""
        if not url.startswith("ssh://") or len(url) <= len("ssh://"):
            raise ValueError(f"{url!r} is not an SSH URL: write ssh://user@host:port or ssh://ALIAS")
        return url
