"""`[proposer] api_key_env` names only a variable that looks like an API key, and a key never goes
in clear to another machine: a plain `http://` endpoint that is not loopback is refused in one line
before any request (a listener there sees no connection); loopback http stays allowed."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from state.proposers.llm_tools import ChatArgs
from state.proposers.proposer import ProposerConfig
from tests.e2e.conftest import make_repo, perfloop, write_target
from tests.llm.fake_openai import ScriptedModel, reply
from tools.errors import LlmError
from tools.llm.chat import api_key, chat

REFUSED = [
    "PERFLOOP_STORE",
    "HOME",
    "SSH_AUTH_SOCK",
    "PATH",
    "PERFLOOP_SERVE_TOKEN",
    "AWS_SECRET_KEY",
    "my_key",
]
KEYS = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HF_TOKEN", "MY_LLM_KEY"]


def chat_args(env: str, base_url: str | None) -> ChatArgs:
    return ChatArgs(
        base_url=base_url,
        api_key_env=env,
        model="m",
        messages=[],
        tools=[],
        max_tokens=1,
        temperature=0,
        timeout_s=5,
        retries=0,
    )


def test_api_key_env_names_only_key_like_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in KEYS:
        assert ProposerConfig(api_key_env=name).api_key_env == name
    for name in REFUSED:
        with pytest.raises(ValidationError, match="does not name an API key"):
            ProposerConfig(api_key_env=name)
        monkeypatch.setenv(name, "a-value-that-must-not-leave")
        with pytest.raises(LlmError, match="does not name an API key"):  # the door's own check too
            api_key(chat_args(name, "http://127.0.0.1:9/v1"))


def listener() -> socket.socket:
    """A TCP listener on this machine's non-loopback address (what a LAN endpoint would be)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    address = next((a for a in out if "." in a and not a.startswith("127.")), None)
    assert address, f"this machine has no non-loopback IPv4 address: {out}"
    s = socket.socket()
    s.bind((address, 0))
    s.listen(4)
    s.settimeout(0.5)
    return s


def test_a_key_is_never_sent_in_clear_to_another_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-travel-in-clear")
    with listener() as lan:
        host, port = lan.getsockname()
        with pytest.raises(LlmError, match="plain http:// to another machine") as refused:
            chat(chat_args("OPENAI_API_KEY", f"http://{host}:{port}/v1"))
        assert "\n" not in str(refused.value)
        with pytest.raises(TimeoutError):
            lan.accept()  # no connection was made
        monkeypatch.delenv("OPENAI_API_KEY")
        assert api_key(chat_args("OPENAI_API_KEY", f"http://{host}:{port}/v1")) == "not-needed"  # keyless
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-is-fine")
    with ScriptedModel([reply("hello")]) as model:  # loopback http (a local server): allowed
        assert chat(chat_args("OPENAI_API_KEY", model.base_url)).content == "hello"
        assert model.auth == ["Bearer sk-loopback-is-fine"]
    assert api_key(chat_args("OPENAI_API_KEY", "https://example.invalid/v1")) == "sk-loopback-is-fine"


def test_the_cli_refuses_a_key_in_clear_in_one_line(tmp_path: Path) -> None:
    target = write_target(tmp_path / "t.toml", make_repo(tmp_path / "engine"))
    with listener() as lan:
        host, port = lan.getsockname()
        args = [
            "run",
            str(target),
            "--proposer",
            "llm",
            "--model",
            "m",
            "--base-url",
            f"http://{host}:{port}/v1",
        ]
        out = perfloop(tmp_path / "home", *args, env={"OPENAI_API_KEY": "sk-must-not-travel"})
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "in clear" in out.stderr and "sk-must" not in out.stderr
        with pytest.raises(TimeoutError):
            lan.accept()
