"""Door tools run on an SSH host through `python -m tools.hosts.remote`, against the test sshd."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from state.door.calls import ApplyArgs, RepoArgs
from tests.launching import launch_args
from tests.recorders import MemoryRecorder
from tests.ssh.conftest import Sshd
from tools import server
from tools.door.live import LiveDoor as Door
from tools.door.registry import spec_of
from tools.errors import PatchError, ToolError
from tools.hosts.client import (
    MAX_ARG_CHARS,
    PRUNE_AFTER_DAYS,
    RemoteExecutor,
    ensure_package,
    package_files,
    package_hash,
)
from tools.hosts.remote import decode_request, encode_request, request_body
from tools.hosts.ssh import SSHHost
from tools.workspace.repo import check_patch, snapshot


def repo_at(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "a.txt").write_text("a\n")
    subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@x",
            "commit",
            "-qm",
            "a",
            "--allow-empty",
        ],
        check=True,
    )
    return path


def test_request_round_trip_and_package_hash(tmp_path: Path) -> None:
    arg = encode_request(request_body(spec_of(snapshot), {"repo": "/a b/$(x)"}))
    assert decode_request(arg) == {
        "name": "repo.snapshot",
        "tool": "tools.workspace.repo:snapshot",
        "input": {"repo": "/a b/$(x)"},
    }
    files = package_files()
    assert "tools/hosts/remote.py" in files and "state/sessions/loop.py" in files
    assert "tools/workspace/profiler_hook.py" in files  # read as text by repo.instrument on the host
    assert not any("__pycache__" in rel for rel in files)
    assert package_hash(files) == package_hash(dict(reversed(files.items())))
    assert package_hash({**files, "tools/hosts/remote.py": b"changed"}) != package_hash(files)


def test_a_host_tool_runs_remotely_and_its_errors_keep_their_type(
    host: SSHHost, sshd: Sshd, tmp_path: Path
) -> None:
    pkg = ensure_package(host)
    assert Path(str(pkg)).is_relative_to(sshd.home)  # never the real ~/.cache/perfloop of the user
    assert ensure_package(host) == pkg and host.exists(pkg / "tools" / "hosts" / "remote.py")
    rec = MemoryRecorder()
    door = Door("s", rec, RemoteExecutor(host, sys.executable, pkg))
    repo = repo_at(tmp_path / "it's $(echo) repo")
    assert door.call(snapshot, RepoArgs(repo=repo)) == snapshot(RepoArgs(repo=repo))
    with pytest.raises(PatchError, match="is not a git checkout"):
        door.call(snapshot, RepoArgs(repo=tmp_path / "missing"))
    error = rec.calls[-1].error
    assert error is not None and error.startswith("PatchError: ")


def test_a_long_request_travels_as_a_file(host: SSHHost, tmp_path: Path) -> None:
    pkg = ensure_package(host)
    repo = repo_at(tmp_path / "repo")
    executor = RemoteExecutor(host, sys.executable, pkg)
    junk = ApplyArgs(repo=repo, diff="x" * (2 * MAX_ARG_CHARS), subject="s", trailers={})
    refused = "patch refused: no file header (`--- a/FILE` / `+++ b/FILE`); send a unified diff"
    with pytest.raises(PatchError, match=f"^{re.escape(refused)}$"):
        executor.call(spec_of(check_patch), junk)
    assert host.run(["ls", "-A", str(pkg / "requests")], "/").stdout == ""  # read, then removed


def test_an_interpreter_without_the_tools_fails_in_one_line(host: SSHHost, tmp_path: Path) -> None:
    executor = RemoteExecutor(host, "/bin/false", ensure_package(host))
    with pytest.raises(ToolError, match=r"repo.snapshot on .* ended \(exit code 1\) without a result"):
        executor.call(spec_of(snapshot), RepoArgs(repo=tmp_path))


def test_pass_env_reaches_the_remote_server_but_no_file_or_command_line(
    host: SSHHost, tmp_path: Path, monkeypatch
) -> None:
    """A secret named in launch.pass_env is forwarded in a 0600 request file the host deletes."""
    import hashlib
    import json as _json

    from state.config.target import LaunchConfig
    from state.door.calls import ServerArgs

    secret = "sk-remote-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16]
    monkeypatch.setenv("PERFLOOP_TEST_API_KEY", secret)
    pkg = ensure_package(host)
    calls = MemoryRecorder()
    door = Door("s", calls, RemoteExecutor(host, sys.executable, pkg))
    seen = tmp_path / "seen.sha"
    launch = LaunchConfig(
        argv=[
            "bash",
            "-c",
            f'printf %s "$PERFLOOP_TEST_API_KEY" | sha256sum > {seen}; '
            'exec python3 -m http.server "$0" --bind 127.0.0.1',
            "{port}",
        ],
        health_path="/",
        startup_timeout_s=30,
        pass_env=["PERFLOOP_TEST_API_KEY"],
    )
    handle = door.call(
        server.launch,
        launch_args(tmp_path, launch, tmp_path / "server.log"),
    )
    try:
        assert seen.read_text().split()[0] == hashlib.sha256(secret.encode()).hexdigest()
        assert not host.exists(pkg / "requests") or not host.sftp().listdir(str(pkg / "requests"))
        assert secret not in _json.dumps([c.model_dump(mode="json") for c in calls.calls])
    finally:
        door.call(server.stop, ServerArgs(server=handle, grace_s=5))


def test_a_new_package_version_prunes_old_unused_ones(host: SSHHost) -> None:
    """Uploading a version removes the versions unused for a week, keeps recent ones, and each use
    marks its version as used."""
    pkg = ensure_package(host)
    root = Path(str(pkg.parent))
    old, recent = root / "pkg-0ld0000000000", root / "pkg-rec000000000"
    week_ago = time.time() - (PRUNE_AFTER_DAYS + 1) * 86400
    for folder, when in ((old, week_ago), (recent, time.time() - 86400)):
        (folder / "tools").mkdir(parents=True, exist_ok=True)
        os.utime(folder, (when, when))
    os.utime(Path(str(pkg)), (week_ago, week_ago))
    assert ensure_package(host) == pkg and Path(str(pkg)).stat().st_mtime > week_ago  # in use: touched
    shutil.rmtree(Path(str(pkg)))  # as if this perfloop version were new to the host
    try:
        assert ensure_package(host) == pkg and host.exists(pkg / "tools" / "hosts" / "remote.py")
        assert not old.exists() and recent.is_dir()
    finally:
        shutil.rmtree(recent, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
