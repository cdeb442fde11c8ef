"""tools/llm/chat.py: the model endpoint's API key, read from the variable the config names."""

from __future__ import annotations

import pytest

from state.proposers.llm_tools import ChatArgs
from tools.llm.chat import api_key
from tools.secrets import redact


def test_the_api_key_comes_from_the_named_variable_and_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_LLM_KEY", "hunter2-0123456789")
    args = ChatArgs(
        base_url=None,
        api_key_env="MY_LLM_KEY",
        model="m",
        messages=[],
        tools=[],
        max_tokens=1,
        temperature=0,
        timeout_s=1,
        retries=0,
    )
    assert api_key(args) == "hunter2-0123456789" and "hunter2" not in redact("key hunter2-0123456789")
