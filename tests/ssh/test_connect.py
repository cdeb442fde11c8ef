"""Connecting to a real sshd: host keys, client keys, passphrases, aliases, ProxyJump, reconnection."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path

import paramiko
import pytest

from tests.ssh.conftest import PASSPHRASE, PASSPHRASE_ENV, Sshd, free_port
from tools import secrets
from tools.hosts.connection import Connection, HostKeyError, SSHAuthError
from tools.hosts.ssh import ConnectionLost, SSHHost


def fingerprint(pub: Path) -> str:
    return subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True, timeout=30
    ).stdout.split()[1]


def echo(conn: Connection) -> str:
    _, out, _ = conn.client().exec_command("echo ok")
    return out.read().decode().strip()


def full_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def test_unknown_host_key_is_refused_with_a_hint(sshd: Sshd, tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text("")
    with pytest.raises(HostKeyError) as err:
        Connection(sshd.config(tmp_path)).client()
    msg = str(err.value)
    assert "\n" not in msg and "unknown host key" in msg and "--trust-new-host" in msg
    assert fingerprint(sshd.dir / "host_key.pub") in msg and f"[127.0.0.1]:{sshd.port}" in msg


def test_trust_new_host_records_the_key_once(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    trusting = Connection(sshd.config(tmp_path, trust_new_host=True))
    assert echo(trusting) == "ok"
    trusting.close()
    assert known.read_text().split() == sshd.known_hosts_line().split()
    assert echo(Connection(sshd.config(tmp_path))) == "ok"


def test_a_changed_host_key_is_refused_even_when_trusting(sshd: Sshd, tmp_path: Path) -> None:
    other = (sshd.dir / "other_key.pub").read_text().split()
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    with pytest.raises(HostKeyError) as err:
        Connection(sshd.config(tmp_path, trust_new_host=True)).client()
    msg = str(err.value)
    assert "\n" not in msg and "CHANGED" in msg and f"[127.0.0.1]:{sshd.port}" in msg
    assert fingerprint(sshd.dir / "other_key.pub") in msg and fingerprint(sshd.dir / "host_key.pub") in msg
    assert len((tmp_path / "known_hosts").read_text().splitlines()) == 1


def test_a_wrong_client_key_is_refused_in_one_line(sshd: Sshd, tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text(f"Host *\n  IdentityFile {sshd.dir / 'other_key'}\n")
    with pytest.raises(SSHAuthError) as err:
        Connection(sshd.config(tmp_path)).client()
    msg = str(err.value)
    assert "\n" not in msg and "refused every key" in msg and "other_key" in msg
    assert "Traceback" not in msg


def test_passphrase_from_env_or_prompt_never_shows(
    sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ssh_config").write_text(f"Host *\n  IdentityFile {sshd.dir / 'locked_key'}\n")
    cfg = sshd.config(tmp_path, passphrase_env=PASSPHRASE_ENV)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    with pytest.raises(SSHAuthError, match=f"encrypted: export \\${PASSPHRASE_ENV}"):
        Connection(cfg).client()
    monkeypatch.setenv(PASSPHRASE_ENV, "not the passphrase")
    with pytest.raises(SSHAuthError, match=f"from \\${PASSPHRASE_ENV} does not decrypt") as err:
        Connection(cfg).client()
    assert "not the passphrase" not in full_text(err.value)
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    assert echo(Connection(cfg)) == "ok"
    assert secrets.redact(f"typed {PASSPHRASE}") == "typed ***"
    monkeypatch.delenv(PASSPHRASE_ENV)
    asked: list[str] = []

    def typed(text: str) -> str:
        asked.append(text)
        return PASSPHRASE

    prompted = Connection(cfg, prompt=typed)
    assert echo(prompted) == "ok" and asked == [f"passphrase for {sshd.dir / 'locked_key'}: "]


def test_ssh_agent_keys_are_offered_after_key_files(
    sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ssh_config").write_text(f"Host *\n  IdentityFile {sshd.dir / 'other_key'}\n")
    sock = tmp_path / "agent.sock"
    started = subprocess.run(
        ["ssh-agent", "-s", "-a", str(sock)], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    pid = re.search(r"SSH_AGENT_PID=(\d+)", started)
    assert pid is not None, started
    agent_pid = int(pid.group(1))
    try:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        subprocess.run(["ssh-add", "-q", str(sshd.client_key)], check=True, timeout=30, capture_output=True)
        assert echo(Connection(sshd.config(tmp_path))) == "ok"  # other_key refused, agent's accepted
    finally:
        os.kill(agent_pid, signal.SIGTERM)


def test_an_alias_from_the_ssh_config(sshd: Sshd, tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text(
        f"Host gpu-box\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User root\n"
        f"  IdentityFile {sshd.client_key}\n"
    )
    host = SSHHost(sshd.config(tmp_path, url="ssh://gpu-box"))
    assert host.run(["id", "-un"], "/").stdout == "root\n"
    host.close()


def test_proxy_jump_through_the_same_sshd(sshd: Sshd, tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text(
        f"Host target\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyJump root@jump\n"
        f"Host *\n  IdentityFile {sshd.client_key}\n  Port {sshd.port}\n  HostName 127.0.0.1\n"
    )
    conn = Connection(sshd.config(tmp_path, url="ssh://root@target"))
    assert echo(conn) == "ok"
    assert isinstance(conn.client().get_transport().sock, paramiko.Channel)  # tunnelled
    conn.close()


def test_a_dropped_connection_is_lost_mid_command_then_reconnected(sshd: Sshd, tmp_path: Path) -> None:
    own = Sshd(sshd.dir, free_port())  # same keys, its own daemon, so restarting it hurts no one
    own.start()
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line() + own.known_hosts_line())
    host = SSHHost(own.config(tmp_path))
    host.conn.backoff_s = 0.2
    try:
        assert host.run(["echo", "up"], tmp_path).stdout == "up\n"
        threading.Timer(1.0, own.stop).start()
        with pytest.raises(ConnectionLost, match="dropped while running 'sleep'") as lost:
            host.run(["sleep", "3"], tmp_path)
        restart = threading.Timer(1.0, own.start)
        restart.start()
        t0 = time.monotonic()
        assert host.run(["echo", "again"], tmp_path).stdout == "again\n"
        assert host.conn.reconnects == 1 and time.monotonic() - t0 >= 0.9
        restart.join()
        # The lost command may outlive its connection (sshd leaves it running): stopped by its
        # group, as the executor stops a lost call's (tools/hosts/client.py).
        assert lost.value.pgid is not None
        host.stop_group(lost.value.pgid, 5.0)
        assert not host.group_members(lost.value.pgid)
    finally:
        host.close()
        own.stop()
