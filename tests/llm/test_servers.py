"""Any OpenAI-compatible server: one that refuses `tool_choice` (vLLM without its flags), a
reasoning model's (`max_completion_tokens`, no temperature, `<think>` first), 429/5xx retried.
The real `propose` node and openai client against the scripted endpoint over real HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.proposer.chat.protocol import strip_reasoning, text_requests
from agent.steps.propose import propose
from tests.llm.conftest import BACKEND, fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, reply
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor

pytestmark = pytest.mark.timeout(60)


def ask(tmp_path: Path, engine: Path, script, like: str = "openai", **cfg):
    with ScriptedModel(script, like=like) as model:
        state = loop_state(tmp_path, engine, model.base_url, **cfg)
        cmd = propose(state, runtime(LiveDoor("s", MemoryRecorder())))
    return cmd, model.requests


def test_reasoning_text_is_removed_before_parsing() -> None:
    assert strip_reasoning("<think>a\nb</think>\n\nanswer") == "answer"
    assert strip_reasoning("stray reasoning</think> answer") == "answer"
    assert strip_reasoning("<think>cut off mid-thought") == ""
    assert strip_reasoning("plain") == "plain"


def test_text_protocol_requests() -> None:
    asked = text_requests("I need:\nREAD a/b.py 10 20\nGREP 'def (f|g)' a\nLIST\n")
    assert asked == [
        ("read_file", {"path": "a/b.py", "start_line": 10, "end_line": 20}),
        ("grep", {"pattern": "def (f|g)", "path": "a"}),
        ("list_dir", {"path": "."}),
    ]
    assert text_requests("READ x.py\nx.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n") == []


def test_a_server_that_refuses_tool_choice_gets_the_text_protocol(tmp_path: Path, engine: Path) -> None:
    script = [reply(f"Let me look.\nREAD {BACKEND}"), reply(fix_answer())]
    cmd, requests = ask(tmp_path, engine, script, like="vllm")
    assert cmd.goto == "approve" and cmd.update["proposal"].files == [BACKEND]
    assert len(requests) == 3 and requests[0]["tool_choice"] == "auto"  # the probe, refused
    assert all("tools" not in r and "tool_choice" not in r for r in requests[1:])
    assert "takes no function tools" in requests[1]["messages"][0]["content"]
    sent = requests[2]["messages"][-1]
    assert sent["role"] == "user" and "get_key_buffer(layer_id).to(q.dtype)" in sent["content"]
    assert cmd.update["llm_usage"].calls == 2  # refusals cost no tokens and no step


def test_a_reasoning_model_gets_max_completion_tokens_and_its_thinking_is_not_applied(
    tmp_path: Path, engine: Path
) -> None:
    cmd, requests = ask(tmp_path, engine, [reply(fix_answer())], like="reasoning")
    assert len(requests) == 3 and cmd.goto == "approve"
    last = requests[2]
    assert "max_tokens" not in last and last["max_completion_tokens"] == 8192 and "temperature" not in last
    p = cmd.update["proposal"]
    assert p.files == [BACKEND] and "import sys" not in p.diff and "<think>" not in p.explanation


def test_429_and_503_are_retried_with_backoff(tmp_path: Path, engine: Path) -> None:
    cmd, requests = ask(tmp_path, engine, [{"status": 429}, {"status": 503}, reply(fix_answer())])
    assert len(requests) == 3 and cmd.goto == "approve"


def test_a_refusal_it_cannot_adapt_to_drops_the_proposal_in_one_line(tmp_path: Path, engine: Path) -> None:
    cmd, requests = ask(tmp_path, engine, [{"status": 401}] * 3, max_proposals=1)
    (failed,) = cmd.update["decisions"]
    assert failed.reason == "model proposal dropped: model endpoint answered HTTP 401: scripted failure"
    assert len(requests) == 1


def test_old_tool_outputs_are_trimmed_to_the_budget_and_the_latest_kept() -> None:
    from agent.proposer.chat.protocol import size, trim
    from state.proposers.llm_tools import ChatMessage

    big = "x" * 4000
    msgs = [ChatMessage(role="system", content="s"), ChatMessage(role="user", content="u")]
    for k in range(4):
        msgs.append(ChatMessage(role="tool", tool_call_id=str(k), content=f"file{k}.py (lines)\n{big}"))
    out, n = trim(msgs, 2500)
    assert n == 2 and size(out) <= 2500
    assert out[2].content is not None and out[2].content.startswith(
        "[output trimmed to fit the context: file0.py"
    )
    assert out[4] == msgs[4] and out[5] == msgs[5]  # the latest two are kept


def test_a_context_length_refusal_is_answered_by_trimming_and_asking_again(
    tmp_path: Path, engine: Path
) -> None:
    from tests.llm.fake_openai import call

    reads = [reply(None, call("read_file", path=BACKEND)) for _ in range(3)]
    too_long = {"status": 400, "message": "This model's maximum context length is 8192 tokens."}
    cmd, requests = ask(tmp_path, engine, [*reads, too_long, reply(fix_answer())], context_tokens=5000)
    assert cmd.goto == "approve" and len(requests) == 5, cmd.update.get("decisions")
    before, after = ([m["content"] for m in r["messages"] if m["role"] == "tool"] for r in requests[3:])
    assert "get_key_buffer" in before[0]  # the refused request had everything
    assert after[0].startswith("[output trimmed to fit the context") and "get_key_buffer" in after[-1]
    assert len(requests[4]["messages"]) == len(requests[3]["messages"])


def test_tool_calls_left_in_the_text_by_a_server_without_a_parser_are_answered(
    tmp_path: Path, engine: Path
) -> None:
    as_text = f'<tool_call>\n{{"name": "read_file", "arguments": {{"path": "{BACKEND}"}}}}\n</tool_call>'
    cmd, requests = ask(tmp_path, engine, [reply(as_text), reply(fix_answer())])
    assert cmd.goto == "approve" and len(requests) == 2
    sent = requests[1]["messages"][-1]
    assert sent["role"] == "user" and "get_key_buffer(layer_id).to(q.dtype)" in sent["content"]
    assert text_requests('<tool_call>{"name": "rm", "arguments": {}}</tool_call>') == []
