"""A key the server prints in its own error log reaches no file perfloop keeps, and no output,
with or without the variable exported when the session is shown later."""

from __future__ import annotations

import os

import pytest

from tests.e2e.conftest import make_repo, perfloop, write_target

pytestmark = pytest.mark.e2e


def test_a_key_printed_by_the_server_is_scrubbed_everywhere(scratch) -> None:
    secret = "sk-printed-" + os.urandom(8).hex()
    repo = make_repo(scratch.root / "engine")
    scratch.allow(repo)
    text = write_target(scratch.inputs / "base.toml", repo).read_text()
    scratch.allow(scratch.inputs / "base.toml")
    target = scratch.write(
        "t.toml",
        text.replace(
            'argv = ["bash", "launch.sh",',
            'pass_env = ["PERFLOOP_E2E_SERVER_TOKEN"]\n'
            'argv = ["bash", "-c", "echo \\"auth failed for key $PERFLOOP_E2E_SERVER_TOKEN\\"; exit 1", "launch",',
        ),
    )
    run = perfloop(
        scratch.home,
        "run",
        "--approve",
        "auto",
        str(target),
        "--json",
        env={"PERFLOOP_E2E_SERVER_TOKEN": secret},
    )
    assert run.returncode == 2, run.stderr[-2000:]  # its first launch failed: one line, as bad input
    assert "auth failed for key" in run.stderr  # the server's last log line, masked
    sid = next(p.name for p in (scratch.home / "sessions").iterdir())
    outputs = [run.stdout + run.stderr]
    for env in ({"PERFLOOP_E2E_SERVER_TOKEN": secret}, {}):
        for args in (("show", sid), ("show", sid, "--json"), ("sessions", "--json")):
            proc = perfloop(scratch.home, *args, env=env)
            assert proc.returncode == 0, proc.stderr
            outputs.append(proc.stdout + proc.stderr)
    assert all(secret not in out for out in outputs)
    assert any("auth failed for key" in out for out in outputs[1:])
    leaks = [p for p in scratch.home.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaks == []
