"""Pure parts of the SSH host: address parsing, config resolution, backoff, command building."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from tools.hosts.ssh import PGID_MARK, LineSplitter, kill_script, parse_members, run_script
from tools.hosts.ssh_config import SSHError, backoff_delays, parse_target, resolve

NASTY = "a dir/with 'single' \"double\" $(touch /tmp/pwned-$RANDOM) `id` ;&|*"


def config(text: str) -> paramiko.SSHConfig:
    return paramiko.SSHConfig.from_text(text)


def test_parse_target() -> None:
    assert parse_target("ssh://root@gpu-1:2222") == ("root", "gpu-1", 2222)
    assert parse_target("ssh://gpu-box") == (None, "gpu-box", None)
    assert parse_target("me@jump:22") == ("me", "jump", 22)
    for bad in ("ssh://", "ssh://host/path", "ssh://host:99999"):
        with pytest.raises(SSHError, match="SSH address|invalid port"):
            parse_target(bad)


def test_resolve_uses_the_config_and_the_url_wins() -> None:
    cfg = config(
        "Host box\n  HostName 10.0.0.5\n  Port 2200\n  User alice\n"
        "  IdentityFile ~/keys/box\n  ProxyJump bastion,me@inner:2022\n"
    )
    ep = resolve("ssh://box", cfg)
    assert (ep.hostname, ep.port, ep.user) == ("10.0.0.5", 2200, "alice")
    assert ep.identity_files == (Path.home() / "keys/box",)
    assert ep.jumps == ("bastion", "me@inner:2022")
    assert ep.known_hosts_name == "[10.0.0.5]:2200"
    assert (resolve("ssh://bob@box:22", cfg).user, resolve("ssh://bob@box:22", cfg).port) == ("bob", 22)
    assert resolve("ssh://box", cfg, follow_jumps=False).jumps == ()
    plain = resolve("ssh://other", cfg)
    assert plain.port == 22 and plain.known_hosts_name == "other"
    assert [p.name for p in plain.identity_files] == ["id_ed25519", "id_ecdsa", "id_rsa"]


def test_backoff_doubles_up_to_a_cap() -> None:
    assert backoff_delays(5, 0.5, cap_s=3) == [0.5, 1.0, 2.0, 3]
    assert backoff_delays(1, 1.0) == []


def sh(line: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", line], cwd=cwd, capture_output=True, text=True, timeout=30)


def test_scripts_quote_every_argument_path_and_value(tmp_path: Path) -> None:
    nasty = tmp_path / NASTY
    nasty.mkdir(parents=True)
    before = set(Path("/tmp").glob("pwned-*"))
    done = sh(run_script(["printf", "%s|", NASTY, "$HOME"], nasty, {"V": NASTY}) + ' "$V"', tmp_path)
    assert done.stdout == f"{NASTY}|$HOME|{NASTY}|"
    assert done.stderr.startswith(PGID_MARK)
    assert set(Path("/tmp").glob("pwned-*")) == before
    with pytest.raises(SSHError, match="not a valid environment variable name"):
        run_script(["true"], "/", {"A;B": "x"})
    assert kill_script(42, "TERM") == "kill -s TERM -- -42 2>/dev/null; true"


def test_parse_members_skips_zombies_and_other_groups() -> None:
    ps = "  10    10 Ss\n  11    10 S+\n  12    10 Z\n  13    99 R\n"
    assert parse_members(ps, 10) == [10, 11]
    assert parse_members(ps, 7) == []


def test_line_splitter_streams_lines_and_takes_the_pgid_mark() -> None:
    seen: list[tuple[str, str]] = []
    err = LineSplitter("stderr", lambda s, line: seen.append((s, line)))
    for chunk in (b"warm", f"up\n{PGID_MARK}77\nhalf ".encode(), "é".encode()[:1], "é".encode()[1:], b"done"):
        err.feed(chunk)
    err.close()
    assert err.pgid == 77
    assert seen == [("stderr", "warmup"), ("stderr", "half édone")]
    assert err.text() == "warmup\nhalf édone"
