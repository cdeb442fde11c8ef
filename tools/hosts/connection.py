"""SSH connections with paramiko: where to connect, whom to trust, which key to use, and staying up.

Where to connect comes from tools/hosts/ssh_config.py (the OpenSSH client config). Host keys are checked against known_hosts: an unknown key is
refused unless the caller trusts new hosts (then it is appended to known_hosts); a changed key is
always refused. Keys come from IdentityFile (or the default ~/.ssh/id_*), decrypted with a
passphrase read from a named environment variable or a prompt, then from ssh-agent. A connection
whose transport died is re-established with exponential backoff on its next use.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import paramiko
from paramiko.auth_strategy import AuthStrategy, InMemoryPrivateKey, OnDiskPrivateKey

from state.engines.ssh import SSHHostConfig
from tools import secrets
from tools.errors import first_line
from tools.hosts.ssh_config import (
    Endpoint,
    HostKeyError,
    SSHAuthError,
    SSHError,
    backoff_delays,
    load_config,
    resolve,
)

Prompt = Callable[[str], str]
"""Asks the user for a key's passphrase, given the question (e.g. getpass.getpass)."""
T = TypeVar("T")


def _fingerprint(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


class _KnownHostsPolicy(paramiko.RejectPolicy):
    """Refuse an unknown host key with a one-line hint, or record it when new hosts are trusted."""

    def __init__(self, known_hosts: Path, trust_new: bool) -> None:
        self.known_hosts, self.trust_new = known_hosts, trust_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.trust_new:
            raise HostKeyError(
                f"unknown host key for {hostname} ({_fingerprint(key)}), not in {self.known_hosts}: "
                f"if this is the right host, connect once with --trust-new-host to record it"
            )
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as f:
            f.write(paramiko.hostkeys.HostKeyEntry([hostname], key).to_line())
        client.get_host_keys().add(hostname, key.get_name(), key)


class _KeyStrategy(AuthStrategy):
    """Offer the endpoint's key files (decrypted on demand), then the ssh-agent's keys."""

    def __init__(self, endpoint: Endpoint, load_key: Callable[[Path], paramiko.PKey]) -> None:
        super().__init__(ssh_config=None)
        self.endpoint, self.load_key, self.agent = endpoint, load_key, paramiko.Agent()

    def get_sources(self) -> Iterator[paramiko.auth_strategy.AuthSource]:
        user = self.endpoint.user
        for path in self.endpoint.identity_files:
            if path.is_file():
                yield OnDiskPrivateKey(user, "ssh-config", path, self.load_key(path))
        for key in self.agent.get_keys():
            yield InMemoryPrivateKey(user, key)


class Connection:
    """A live SSH connection to one host (through its jump hosts), re-established when it drops."""

    def __init__(
        self, cfg: SSHHostConfig, prompt: Prompt | None = None, *, tries: int = 6, backoff_s: float = 0.5
    ) -> None:
        self.cfg, self.prompt, self.tries, self.backoff_s = cfg, prompt, tries, backoff_s
        self.known_hosts = cfg.known_hosts or Path.home() / ".ssh" / "known_hosts"
        self.config = load_config(cfg.config_file)
        self.endpoint = resolve(cfg.url, self.config)
        self.reconnects = 0
        self._clients: list[paramiko.SSHClient] = []
        self._keys: dict[Path, paramiko.PKey] = {}

    def client(self) -> paramiko.SSHClient:
        """The connected client: connects on first use, reconnects (with backoff) if it dropped."""
        if not self._clients:
            self._connect()
        elif not self.alive():
            self.reconnect()
        return self._clients[-1]

    def alive(self) -> bool:
        """Whether the transport to the host is up."""
        transport = self._clients[-1].get_transport() if self._clients else None
        return transport is not None and transport.is_active()

    def opening(self, open_fn: Callable[[paramiko.SSHClient], T]) -> T:
        """`open_fn(client)` (open a channel or SFTP session), reconnecting once if the transport
        turns out dead. Only openings are retried: nothing has run on the host yet."""
        try:
            return open_fn(self.client())
        except (paramiko.SSHException, EOFError, OSError):
            if self.alive():
                raise
        self.reconnect()
        return open_fn(self.client())

    def reconnect(self) -> None:
        """Drop the connection and connect again, with exponential backoff between failed tries."""
        self.close()
        delays = backoff_delays(self.tries, self.backoff_s)
        for delay in [*delays, None]:
            try:
                self._connect()
                self.reconnects += 1
                return
            except (HostKeyError, SSHAuthError):
                raise
            except SSHError as exc:
                if delay is None:
                    raise SSHError(
                        f"lost the connection to {self.endpoint} and {self.tries} "
                        f"reconnection tries over {sum(delays):.0f}s failed: {exc}"
                    ) from exc
                time.sleep(delay)

    def close(self) -> None:
        """Close the connection and its jump hosts' connections."""
        for client in reversed(self._clients):
            client.close()
        self._clients = []

    def _connect(self) -> None:
        hops = [resolve(j, self.config, follow_jumps=False) for j in self.endpoint.jumps]
        hops.append(self.endpoint)
        sock = None
        try:
            for i, hop in enumerate(hops):
                self._clients.append(self._open(hop, sock))
                if i + 1 < len(hops):
                    sock = self._tunnel(hop, hops[i + 1])
        except BaseException:
            self.close()
            raise

    def _tunnel(self, jump: Endpoint, to: Endpoint) -> paramiko.Channel:
        try:
            return (
                self._clients[-1]
                .get_transport()
                .open_channel(
                    "direct-tcpip",
                    (to.hostname, to.port),
                    ("127.0.0.1", 0),
                    timeout=self.cfg.connect_timeout_s,
                )
            )
        except (paramiko.SSHException, OSError) as exc:
            raise SSHError(
                f"jump host {jump} could not open a tunnel to {to.hostname}:{to.port}: "
                f"{exc or type(exc).__name__}"
            ) from exc

    def _open(self, hop: Endpoint, sock: paramiko.Channel | None) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.known_hosts.is_file():
            client.load_host_keys(str(self.known_hosts))
        client.set_missing_host_key_policy(_KnownHostsPolicy(self.known_hosts, self.cfg.trust_new_host))
        strategy = _KeyStrategy(hop, self._key)
        timeout = self.cfg.connect_timeout_s
        try:
            client.connect(
                hop.hostname,
                hop.port,
                username=hop.user,
                sock=sock,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                auth_strategy=strategy,
            )
        except BaseException as exc:
            client.close()
            raise _translate(exc, hop, self.known_hosts) from exc
        finally:
            strategy.agent.close()
        if self.cfg.keepalive_s:
            client.get_transport().set_keepalive(self.cfg.keepalive_s)
        return client

    def _key(self, path: Path) -> paramiko.PKey:
        """The private key at `path`, decrypted with the passphrase from the env var or prompt."""
        if path not in self._keys:
            try:
                self._keys[path] = paramiko.PKey.from_path(path)
            except (paramiko.PasswordRequiredException, TypeError):  # TypeError: from cryptography
                self._keys[path] = self._decrypt(path)
            except (paramiko.SSHException, ValueError, OSError) as exc:
                raise SSHAuthError(f"cannot read private key {path}: {exc}") from None
        return self._keys[path]

    def _decrypt(self, path: Path) -> paramiko.PKey:
        name = self.cfg.passphrase_env
        passphrase = os.environ.get(name) if name else None
        if passphrase is None and self.prompt is not None:
            passphrase = self.prompt(f"passphrase for {path}: ")
        if passphrase is None:
            hint = f"export ${name}" if name else "set passphrase_env to the variable holding it"
            raise SSHAuthError(f"private key {path} is encrypted: {hint} (or run interactively)")
        secrets.register(passphrase)
        try:
            return paramiko.PKey.from_path(path, passphrase.encode())
        except (paramiko.SSHException, ValueError):
            source = f"${name}" if name else "the prompt"
            raise SSHAuthError(f"the passphrase from {source} does not decrypt {path}") from None


def _translate(exc: BaseException, hop: Endpoint, known_hosts: Path) -> BaseException:
    """A one-line SSHError for a failed connection to `hop` (other exceptions unchanged)."""
    if isinstance(exc, SSHError):
        return exc
    if isinstance(exc, paramiko.BadHostKeyException):
        return HostKeyError(
            f"host key for {hop.known_hosts_name} CHANGED: {known_hosts} has "
            f"{_fingerprint(exc.expected_key)}, the server offers {_fingerprint(exc.key)}; refusing to "
            f"connect (if the host was reinstalled, run `ssh-keygen -R '{hop.known_hosts_name}' "
            f"-f {known_hosts}` and reconnect with --trust-new-host)"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        keys = ", ".join(str(p) for p in hop.identity_files if p.is_file()) or "no key file"
        return SSHAuthError(
            f"{hop} refused every key offered ({keys}, plus ssh-agent keys): add "
            f"the public key to its authorized_keys or set IdentityFile for it"
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return SSHError(f"cannot connect to {hop}: connection refused or host unreachable")
    if isinstance(exc, (paramiko.SSHException, EOFError, OSError)):
        reason = first_line(exc)
        return SSHError(f"cannot connect to {hop}: {reason}")
    return exc
