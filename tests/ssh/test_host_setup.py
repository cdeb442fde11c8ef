"""`perfloop host setup`: a bare Python on an SSH host gets perfloop's own environment from
wheels fetched here (real `pip download`, real sshd, real SFTP), its own site-packages untouched."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest

from state.door.calls import RepoArgs
from state.engines.workspace import WorkspaceSnapshot
from tests.e2e.conftest import PERFLOOP, git, last_json, make_repo, perfloop
from tests.ssh.conftest import Sshd, free_port
from tools.door.registry import spec_of
from tools.errors import ToolError
from tools.hosts.client import RemoteExecutor, ensure_package
from tools.hosts.setup import ensure_env
from tools.hosts.ssh import SSHHost
from tools.workspace import repo as repo_tools


def own_sshd(sshd: Sshd, where: Path) -> Sshd:
    """A daemon with its own home, so the environment made here reaches no other test."""
    where.mkdir(mode=0o700)
    for name in ("host_key", "host_key.pub", "client_key", "client_key.pub", "authorized_keys"):
        shutil.copy2(sshd.dir / name, where / name)
    own = Sshd(where, free_port())
    own.start()
    return own


def test_setup_gives_a_bare_python_perfloops_environment(sshd: Sshd, tmp_path: Path) -> None:
    own = own_sshd(sshd, tmp_path / "sshd")
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
        bare = str(tmp_path / "bare" / "bin" / "python")
        repo = make_repo(tmp_path / "engine")
        (tmp_path / "client").mkdir()
        host = SSHHost(own.config(tmp_path / "client", python=bare))
        executor = RemoteExecutor(host, bare, ensure_package(host))
        snapshot = spec_of(repo_tools.snapshot)
        with pytest.raises(ToolError, match="perfloop host setup"):
            executor.call(snapshot, RepoArgs(repo=repo))
        # First use: asked, declined: nothing is uploaded.
        asked: list[str] = []

        def decline(question: str) -> bool:
            asked.append(question)
            return False

        assert ensure_env(host, bare, decline) is False
        assert (
            "lacks perfloop's dependencies" in asked[0]
            and list((own.home / ".cache" / "perfloop").glob("env-*")) == []
        )

        # Consent given: wheels fetched here (pip download) for that Python, uploaded, unpacked.
        assert ensure_env(host, bare, lambda q: True) is True
        tag = f"env-cp{sys.version_info[0]}{sys.version_info[1]}"
        site = own.home / ".cache" / "perfloop" / tag / "site"
        assert all((site / p).is_dir() for p in ("pydantic", "git", "msgspec", "regex"))
        assert not (site.parent / "wheels").exists()
        assert ensure_env(host, bare, None) is True  # nothing more to ask

        # perfloop's tools now run there with that Python; the Python itself is as it was.
        snap = cast(WorkspaceSnapshot, executor.call(snapshot, RepoArgs(repo=repo)))  # the tool's result
        assert snap.head_sha == git(repo, "rev-parse", "HEAD").strip()
        plain = subprocess.run([bare, "-c", "import pydantic"], capture_output=True, text=True)
        assert plain.returncode != 0 and "pydantic" in plain.stderr

        # `perfloop host setup` (e.g. after an upgrade): replaced at once, still working, nothing left over.
        user = tmp_path / "user"
        (user / ".ssh").mkdir(parents=True)
        (user / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {own.client_key}\n")
        url = f"ssh://root@127.0.0.1:{own.port}"
        proc = perfloop(
            tmp_path / "home",
            *("host", "setup", url, "--python", bare, "--trust-new-host", "--json"),
            env={"HOME": str(user)},
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert Path(last_json(proc)["site"]) == site
        assert sorted(p.name for p in site.parent.parent.iterdir() if p.name.startswith("env-")) == [tag]
        assert cast(WorkspaceSnapshot, executor.call(snapshot, RepoArgs(repo=repo))).head_sha == snap.head_sha
        host.close()
    finally:
        own.stop()


def test_setup_refuses_a_url_that_is_not_ssh(tmp_path: Path) -> None:
    proc = perfloop(tmp_path / "home", "host", "setup", "http://example.com")
    assert proc.returncode == 2
    assert "is not an SSH URL" in proc.stderr.strip().splitlines()[-1]


def test_a_run_from_a_terminal_offers_setup_on_first_use(sshd: Sshd, tmp_path: Path) -> None:
    """docs/usage.md (was the README): "A run from a terminal offers it on first use". `perfloop run` of a target whose
    host Python lacks perfloop's dependencies: without a terminal it is not asked (the first tool
    call says what to run); with one (stdin a pty) it is asked before any tool runs there, and a
    "no" uploads nothing."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare = str(tmp_path / "bare" / "bin" / "python")
    repo = make_repo(tmp_path / "engine")
    target = tmp_path / "t.toml"
    target.write_text(f"""
name = "bare host"
kind = "mla_server"
repo = {json.dumps(str(repo))}
model = "mla-demo"
{sshd.host_toml(tmp_path / "client", bare)}[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}"]
[measure]
prompts = ["Explain the KV cache."]
""")
    envs = list((sshd.home / ".cache" / "perfloop").glob("env-*"))
    home = tmp_path / "home"
    question = f"{bare} on root@127.0.0.1:{sshd.port} lacks perfloop's dependencies"
    told = "cannot import perfloop's tools"

    unasked = perfloop(home, "run", "--approve", "auto", str(target), "--json")  # stdin: /dev/null
    assert unasked.returncode == 1, (unasked.returncode, unasked.stderr[-2000:])
    assert "lacks perfloop's dependencies" not in unasked.stderr
    failed = last_json(unasked)
    assert failed["status"] == "failed" and told in failed["stop_reason"], failed
    assert "run `perfloop host setup ssh://HOST --python" in failed["stop_reason"], failed

    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json"],
        env={**os.environ, "PERFLOOP_HOME": str(home)},
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(secondary)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # up to the question (or the end, if it is never asked)
            seen.append(line)
            if "lacks perfloop's dependencies" in line:
                break
        assert seen and seen[-1].startswith(question), "".join(seen)[-2000:]
        os.write(primary, b"n\n")
        out, rest = proc.communicate(timeout=300)
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (proc.returncode, rest[-2000:])
    declined = json.loads(out.strip().splitlines()[-1])
    assert declined["status"] == "failed" and told in declined["stop_reason"], declined
    assert list((sshd.home / ".cache" / "perfloop").glob("env-*")) == envs  # declined: nothing uploaded
