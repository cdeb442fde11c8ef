"""Secrets are masked at write time (checkpoints included) and the server's environment follows
one policy: perfloop's environment minus secret-looking variables not named in pass_env."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.sessions.checkpoint import open_checkpointer, serializer
from tools import secrets

SECRET = "sk-unit-" + os.urandom(6).hex()


@pytest.fixture
def exported(monkeypatch):
    monkeypatch.setenv("PERFLOOP_UNIT_API_KEY", SECRET)
    yield SECRET


def test_checkpoints_are_scrubbed_at_write_time(tmp_path: Path, exported: str, monkeypatch) -> None:
    saver = open_checkpointer(tmp_path)
    cp = empty_checkpoint()
    cp["channel_values"] = {"error": f'server said: key={exported} (quoted "{exported}")', "n": [1, 2]}
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    saved = saver.put(config, cp, {"source": "input", "step": 1}, {})
    assert isinstance(saver, SqliteSaver)  # no url: SQLite
    saver.conn.commit()
    monkeypatch.delenv("PERFLOOP_UNIT_API_KEY")  # a later reader without the variable
    found = saver.get_tuple(saved)
    assert found is not None
    values = found.checkpoint["channel_values"]
    assert exported not in values["error"] and "*" * len(exported) in values["error"]
    assert values["n"] == [1, 2]
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and exported.encode() in p.read_bytes()]
    assert leaks == []


def test_registered_values_are_masked_whatever_their_name(monkeypatch) -> None:
    value = "plain-" + os.urandom(6).hex()
    monkeypatch.setattr(secrets, "_registered", set())
    secrets.register(value)
    kind, data = serializer().dumps_typed({"log": f"x{value}y", "quote": f'"{value}\\'})
    assert value.encode() not in data
    assert serializer().loads_typed((kind, data))["log"] == "x" + "*" * len(value) + "y"
    assert value not in secrets.redact(f'{{"a": "{value}"}}')


def test_json_escaped_secrets_are_masked(monkeypatch) -> None:
    monkeypatch.setenv("ODD_TOKEN", 'ab"cd\\ef-é')
    import json

    assert "ab" not in secrets.redact(json.dumps({"x": 'ab"cd\\ef-é'}))
    assert "ab" not in secrets.redact(json.dumps({"x": 'ab"cd\\ef-é'}, ensure_ascii=False))


def test_server_env_policy() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "HF_TOKEN": "t1",
        "MY_API_KEY": "k",
        "PLAIN": "p",
        "DB_PASSWORD": "pw",
        "PERFLOOP_STORE": "postgresql://u:pw@db/perfloop",  # the store's password: perfloop's only
    }
    env = secrets.server_env(environ, {"PYTHON": "py"}, ["HF_TOKEN"])
    assert env == {"PATH": "/bin", "HOME": "/h", "HF_TOKEN": "t1", "PLAIN": "p", "PYTHON": "py"}


def test_scrub_file(tmp_path: Path, exported: str) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"starting\nerror: bad key {exported}\n")
    secrets.scrub_file(log)
    assert exported not in log.read_text() and "bad key ***" in log.read_text()
    secrets.scrub_file(tmp_path / "missing.log")
