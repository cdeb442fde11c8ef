"""A real OpenSSH sshd on 127.0.0.1 (a free high port), with generated host and client keys."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from state.engines.ssh import SSHHostConfig
from tools.hosts.ssh import SSHHost

SSHD = Path("/usr/sbin/sshd")
PASSPHRASE = "correct horse battery staple"
PASSPHRASE_ENV = "PERFLOOP_TEST_SSH_KEY_PASSPHRASE"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", path.name, "-f", str(path)],
        check=True,
        timeout=30,
    )
    return path


def sshd_descendants(pid: int) -> list[int]:
    """The sshd processes under `pid` (one per connection, and its privilege-separated child)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if stat[stat.index("(") + 1 : stat.rindex(")")] == "sshd":
                parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _sshd_alive(pid: int) -> bool:
    """Whether `pid` is a live sshd (a zombie's sockets are closed already)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.index("(") + 1 : stat.rindex(")")] == "sshd" and stat[stat.rindex(")") + 2] != "Z"


def port_holders(port: int) -> list[int]:
    """The live sshd processes holding a TCP socket whose local port is `port`: its listener and
    every connection it accepted, whatever their parent is now (a dead listener's are reparented)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        lines = Path(table).read_text().splitlines()[1:] if Path(table).exists() else []
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                inodes.add(f"socket:[{fields[9]}]")
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _sshd_alive(int(entry.name)):
            try:
                if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                    found.append(int(entry.name))
            except OSError:
                continue  # gone since it was listed
    return found


def remote_calls() -> list[dict]:
    """The tool calls (`name`, `input`) that `python -m tools.hosts.remote` processes on this
    machine run now (the call is argv[3], base64 JSON; one in a request file, `@PATH`, is skipped)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
            if b"tools.hosts.remote" not in argv or len(argv) < 4 or argv[3].startswith(b"@"):
                continue
            found.append(json.loads(base64.b64decode(argv[3])))
        except (OSError, ValueError):
            continue
    return found


def answered_requests(logs: Iterable[Path], base_url: str) -> bool:
    """Whether the demo server at `base_url`, logging to one of `logs`, has answered a POST since it
    said it was ready (its access-log line): a measurement's requests are under way on it."""
    ready = re.compile(rf"mla_server ready on http://\S+:{urlsplit(base_url).port}\n")
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        started = ready.search(text)
        if started and '"POST /' in text[started.end() :]:
            return True
    return False


@dataclass
class Sshd:
    """One sshd daemon: its directory (keys, config, log), port and pid file."""

    dir: Path
    port: int
    env: dict[str, str] = field(default_factory=dict)
    """More variables every SSH session gets (sshd's `SetEnv`; no spaces in values)."""

    @property
    def home(self) -> Path:
        """The login user's home as the tests' SSH sessions see it (HOME, and where SFTP starts):
        a folder of the test's own, so nothing lands in (or is pruned from) the real ~/.perfloop
        or ~/.cache/perfloop of the user running the tests."""
        return self.dir / "home"

    @property
    def pidfile(self) -> Path:
        return self.dir / f"sshd-{self.port}.pid"

    @property
    def client_key(self) -> Path:
        return self.dir / "client_key"

    def start(self) -> None:
        cfg = self.dir / f"sshd-{self.port}.conf"
        cfg.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.dir / 'host_key'}",
                    f"PidFile {self.pidfile}",
                    f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "AllowTcpForwarding yes",
                    f"Subsystem sftp internal-sftp -d {self.home}",
                    " ".join(["SetEnv", f"HOME={self.home}", *(f"{k}={v}" for k, v in self.env.items())]),
                    "MaxStartups 50",
                    "",
                ]
            )
        )
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        log = self.dir / f"sshd-{self.port}.log"
        subprocess.run([str(SSHD), "-f", str(cfg), "-E", str(log)], check=True, timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on {self.port}: {log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Stop the daemon and every connection it serves, by pid: the listener first, killed (on
        SIGTERM it still accepts the connections already queued, whose processes a list of its
        children made beforehand misses), so that no connection can start again once the served
        ones drop; then every sshd process still holding a connection on its port."""
        if not self.pidfile.exists():
            return
        pid = int(self.pidfile.read_text())
        sessions = sshd_descendants(pid)
        if _sshd_alive(pid):  # not a stale pid file's number, reused since
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _sshd_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.pidfile.unlink(missing_ok=True)
        while (left := [p for p in sessions if _sshd_alive(p)] + port_holders(self.port)) and (
            time.monotonic() < deadline
        ):
            for child in left:
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        if left or _sshd_alive(pid):
            raise RuntimeError(f"sshd on port {self.port} outlived SIGKILL: processes {[pid, *left]}")

    def known_hosts_line(self) -> str:
        key = (self.dir / "host_key.pub").read_text().split()
        return f"[127.0.0.1]:{self.port} {key[0]} {key[1]}\n"

    def client_files(self, tmp: Path) -> tuple[Path, Path]:
        """A client's `known_hosts` (this sshd's key) and SSH config (the good client key) in
        `tmp`, made unless there."""
        tmp.mkdir(parents=True, exist_ok=True)
        known, ssh_config = tmp / "known_hosts", tmp / "ssh_config"
        if not known.exists():
            known.write_text(self.known_hosts_line())
        if not ssh_config.exists():
            ssh_config.write_text(f"Host 127.0.0.1\n  IdentityFile {self.client_key}\n")
        return known, ssh_config

    def host_toml(self, tmp: Path, python: str, *more: str, table: str = "host") -> str:
        """A target file's `[host]` table (or `table`, e.g. `hosts.host`) for this sshd with the good
        client key (client files in `tmp`), the host's `python`, and `more` lines (`keepalive_s = 2`)."""
        known, ssh_config = self.client_files(tmp)
        q = json.dumps  # a JSON string is a valid TOML basic string, quotes and all
        lines = [
            f"[{table}]",
            'kind = "ssh"',
            f'url = "ssh://root@127.0.0.1:{self.port}"',
            f"known_hosts = {q(str(known))}",
            f"config_file = {q(str(ssh_config))}",
            f"python = {q(python)}",
            *more,
        ]
        return "\n".join(lines) + "\n"

    def config(self, tmp: Path, **fields: object) -> SSHHostConfig:
        """A host config for this sshd with the good client key (via a temp SSH config file)."""
        known, ssh_config = self.client_files(tmp)
        values = dict(
            url=f"ssh://root@127.0.0.1:{self.port}",
            known_hosts=known,
            config_file=ssh_config,
            connect_timeout_s=20,
            keepalive_s=5,
        )
        return SSHHostConfig(**{**values, **fields})


@pytest.fixture(scope="session")
def sshd_dir() -> Iterator[Path]:
    if not SSHD.exists():
        pytest.fail("no /usr/sbin/sshd: install openssh-server (apt-get install -y openssh-server)")
    root = Path(tempfile.mkdtemp(prefix="perfloop-sshd-"))
    root.chmod(0o700)
    keygen(root / "host_key")
    keygen(root / "client_key")
    keygen(root / "other_key")
    keygen(root / "locked_key", PASSPHRASE)
    authorized = [(root / n).with_suffix(".pub").read_text() for n in ("client_key", "locked_key")]
    (root / "authorized_keys").write_text("".join(authorized))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def sshd(sshd_dir: Path) -> Iterator[Sshd]:
    daemon = Sshd(sshd_dir, free_port())
    daemon.start()
    yield daemon
    daemon.stop()


@pytest.fixture(autouse=True)
def _no_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests authenticate only with the keys they name, never a developer's ssh-agent."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


@pytest.fixture(scope="session")
def host(sshd: Sshd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHost]:
    """An SSH host connected to the test sshd as root with the good client key."""
    remote = SSHHost(sshd.config(tmp_path_factory.mktemp("client")))
    yield remote
    remote.close()
