"""The server's environment is built from a stated policy, on a real launched process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from state.door.calls import ServerArgs
from tests.integration.test_host_server import launch_args
from tools import secrets, server
from tools.errors import ServerError


def test_the_server_gets_pass_env_and_no_other_secret(tmp_path: Path, monkeypatch) -> None:
    passed, withheld = "sk-pass-" + os.urandom(4).hex(), "sk-keep-" + os.urandom(4).hex()
    monkeypatch.setenv("PERFLOOP_IT_API_KEY", passed)
    monkeypatch.setenv("PERFLOOP_IT_OTHER_TOKEN", withheld)
    monkeypatch.setenv("PERFLOOP_IT_PLAIN", "plain-value")
    dump = tmp_path / "env.txt"
    args = launch_args(
        tmp_path,
        ["bash", "-c", f"env > {dump}; exec {{python}} -m http.server {{port}} --bind 127.0.0.1"],
        pass_env=["PERFLOOP_IT_API_KEY"],
        env={"PERFLOOP_IT_EXTRA": "x"},
    )
    handle = server.launch(args)
    server.stop(ServerArgs(server=handle, grace_s=5))
    env = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert env["PERFLOOP_IT_API_KEY"] == passed and env["PERFLOOP_IT_EXTRA"] == "x"
    assert env["PERFLOOP_IT_PLAIN"] == "plain-value" and "PATH" in env
    assert "PERFLOOP_IT_OTHER_TOKEN" not in env
    assert passed in secrets._registered  # masked in whatever perfloop writes from now on


def test_a_secret_the_server_prints_is_scrubbed_from_its_log_and_the_error(
    tmp_path: Path, monkeypatch
) -> None:
    value = "plain-named-" + os.urandom(4).hex()
    monkeypatch.setenv("PERFLOOP_IT_VALUE", value)  # not secret-looking: registered by pass_env
    args = launch_args(
        tmp_path,
        ["bash", "-c", 'echo "fatal: bad credential $PERFLOOP_IT_VALUE"; exit 1'],
        pass_env=["PERFLOOP_IT_VALUE"],
    )
    with pytest.raises(ServerError) as err:
        server.launch(args)
    assert "bad credential" in str(err.value) and value not in secrets.redact(str(err.value))
    assert value not in args.log_path.read_text()
