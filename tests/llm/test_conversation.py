"""The model's conversation inside `propose`: a real openai client against a scripted server on
127.0.0.1, the real door and session store, a real git checkout of the demo target."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from agent.proposer.chat.conversation import Conversation
from tests.llm.conftest import (
    BACKEND,
    NEW,
    OLD,
    edit_block,
    fix_answer,
    loop_state,
    runtime,
)
from tests.llm.fake_openai import ScriptedModel, call, last_tool_text, last_user_text, reply
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDivergence, ReplayDoor
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.timeout(120)


def converse(tmp_path: Path, engine: Path, script, store: SessionStore | None = None, **cfg):
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = store or SessionStore(tmp_path / "sessions.sqlite")
    with ScriptedModel(script) as model:
        state = loop_state(tmp_path, engine, model.base_url, **cfg)
        assert state.diagnosis is not None
        outcome = Conversation(state, runtime(LiveDoor("s-llm", store)), state.diagnosis.findings[0]).run()
    return outcome, model, store, state


def read_then_fix(body: dict) -> dict:
    """The model's second turn: it must have been given the backend's source."""
    assert "get_key_buffer(layer_id).to(q.dtype)" in last_tool_text(body)
    return reply(fix_answer())


def test_reads_the_backend_and_proposes_gather_then_cast(tmp_path: Path, engine: Path) -> None:
    script = [reply(None, call("read_file", path=BACKEND)), read_then_fix]
    outcome, model, store, _ = converse(tmp_path, engine, script)
    p = outcome.proposal
    assert p is not None, outcome.reason
    assert p.proposer == "llm" and p.source == "llm" and p.files == [BACKEND]
    assert p.origin.model == "scripted-coder" and p.origin.repairs == 0
    assert p.title.startswith("Gather-then-cast") and "Cast only the rows" in p.explanation
    assert outcome.usage.calls == 2 and outcome.usage.tokens > 0
    first = model.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file", "grep", "list_dir"]
    assert "strict" not in first["tools"][0]["function"]
    context = first["messages"][1]["content"]
    assert "aten::copy_ dims [[65536, 1, 576]" in context and '<data kind="profile">' in context
    assert f"{BACKEND}:26" in context and "get_key_buffer(layer_id).to(q.dtype)" in context  # hot source
    names = [c.name for c in store.tool_calls("s-llm")]
    assert names == [
        "code.read_file",
        "llm.chat",
        "code.read_file",
        "llm.chat",
        "code.read_texts",
        "code.check_diff",
    ]
    subprocess.run(["git", "apply", "--check", "-"], cwd=engine, input=p.diff, text=True, check=True)
    assert "+            kv = k_buffer[kv_indices].to(q.dtype)" in p.diff


def test_malformed_and_ambiguous_blocks_are_repaired(tmp_path: Path, engine: Path) -> None:
    no_divider = f"{BACKEND}\n<<<<<<< SEARCH\n{OLD}>>>>>>> REPLACE\n"
    one_line = "        k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)\n"
    twice = edit_block(BACKEND, one_line, "        k_buffer = self.kv_pool.get_key_buffer(layer_id)\n")
    broken = edit_block(BACKEND, OLD, NEW.replace("kv = k_buffer", "kv = (k_buffer"))
    seen = []

    def expect(fragment: str, answer: str):
        def step(body: dict) -> dict:
            seen.append(last_user_text(body))
            assert fragment in seen[-1], seen[-1]
            return reply(answer)

        return step

    script = [
        reply(no_divider),
        expect("needs a `=======` line", twice),
        expect("matches 2 places", broken),
        expect("does not parse", fix_answer()),
    ]
    outcome, _, _, _ = converse(tmp_path, engine, script)
    assert outcome.proposal is not None, outcome.reason
    assert outcome.proposal.origin.repairs == 3
    assert "2 repair round(s) left" in seen[0] and "0 repair round(s) left" in seen[2]


def test_paths_outside_the_repo_git_and_instrumentation_are_refused(tmp_path: Path, engine: Path) -> None:
    (tmp_path / "secret.txt").write_text("outside")
    results: list[str] = []

    def record(body: dict) -> dict:
        results.extend(m["content"] for m in body["messages"] if m["role"] == "tool")
        return reply(edit_block("../outside.py", "a\n", "b\n"))

    def refused(fragment: str, answer: str):
        def step(body: dict) -> dict:
            assert fragment in last_user_text(body), last_user_text(body)
            return reply(answer)

        return step

    marker = "@_perfloop_profiled  # perfloop-instrumentation\n"
    script = [
        reply(
            None,
            call("read_file", path="../secret.txt"),
            call("read_file", path=".git/config"),
            call("list_dir", path="/etc"),
            call("grep", pattern="(", path="."),
            call("nope"),
        ),
        record,
        refused("outside the repository", edit_block(".git/hooks/pre-commit", "", "rm -rf /\n")),
        refused("inside .git", edit_block("mla_server/model_runner.py", marker, "")),
        refused("profiler instrumentation", edit_block("tests/test_speed.py", "", "assert True\n")),
    ]
    outcome, _, _, _ = converse(tmp_path, engine, script)
    assert outcome.proposal is None
    assert outcome.reason.startswith("no valid patch after 3 repair round(s): path check")
    assert "protected" in outcome.reason
    assert results[0].startswith("error: refused:") and "outside the repository" in results[0]
    assert "inside .git" in results[1] and "outside the repository" in results[2]
    assert "bad regular expression" in results[3] and "no tool 'nope'" in results[4]


def test_http_500_is_retried_and_length_is_sent_back(tmp_path: Path, engine: Path) -> None:
    script = [
        {"status": 500},
        reply("SEARCH blocks coming: mla_ser", finish="length"),
        lambda body: reply(fix_answer()) if "cut off" in last_user_text(body) else reply("?"),
    ]
    outcome, model, store, _ = converse(tmp_path, engine, script, retries=2)
    assert outcome.proposal is not None, outcome.reason
    assert len(model.requests) == 3  # the 500 was retried by the client
    chats = [c for c in store.tool_calls("s-llm") if c.name == "llm.chat"]
    assert len(chats) == 2 and all(c.error is None for c in chats)
    assert chats[0].output["finish_reason"] == "length"


def test_budgets_end_the_conversation_with_the_reason(tmp_path: Path, engine: Path) -> None:
    browse = [reply(None, call("list_dir")) for _ in range(5)]
    outcome, model, _, _ = converse(tmp_path, engine, browse, max_steps=2)
    assert outcome.proposal is None and len(model.requests) == 2
    assert outcome.reason == "step budget exhausted: 2 model calls without a valid patch"
    outcome, _, _, _ = converse(tmp_path / "b", engine, browse, max_tokens=50)
    assert outcome.proposal is None and outcome.reason.startswith("token budget exhausted")


def test_the_time_budget_ends_the_conversation_after_the_call_that_spent_it(
    tmp_path: Path, engine: Path
) -> None:
    """docs/usage.md (was the README): the model's time budget (`max_seconds`, `--llm-max-seconds`) is the summed duration
    of its calls per proposal; a budget of a microsecond is spent by the first call, so the second
    is never sent (the step and token budgets would allow five)."""
    browse = [reply(None, call("list_dir")) for _ in range(5)]
    outcome, model, store, _ = converse(tmp_path, engine, browse, max_seconds=1e-6)
    assert outcome.proposal is None and len(model.requests) == 1, outcome.reason
    assert outcome.usage.calls == 1 and outcome.usage.seconds > 1e-6
    assert re.fullmatch(r"time budget exhausted: \d+ s of model time \(max 0\)", outcome.reason or "")
    assert [c.name for c in store.tool_calls("s-llm")].count("llm.chat") == 1


def test_endpoint_errors_drop_the_proposal(tmp_path: Path, engine: Path) -> None:
    outcome, model, _, _ = converse(tmp_path, engine, [{"status": 500}] * 3, retries=1)
    assert outcome.proposal is None and len(model.requests) == 2
    assert outcome.reason == "model endpoint answered HTTP 500: scripted failure"


def test_replay_answers_offline_and_stops_at_a_changed_request(tmp_path: Path, engine: Path) -> None:
    script = [reply(None, call("read_file", path=BACKEND)), read_then_fix]
    live, _, store, state = converse(tmp_path, engine, script)
    calls = store.tool_calls("s-llm")
    # the server is gone: the replay door answers every call from the recording
    replayed = Conversation(state, runtime(ReplayDoor("s-llm", calls)), state.diagnosis.findings[0]).run()
    assert replayed.proposal == live.proposal and replayed.usage == live.usage
    other = state.model_copy(
        update={
            "target": state.target.model_copy(
                update={"proposer": state.target.proposer.model_copy(update={"model": "other"})}
            )
        }
    )
    with pytest.raises(
        ReplayDivergence, match=r"call #1 \(llm.chat from node propose\) has different input: .model"
    ):
        Conversation(other, runtime(ReplayDoor("s-llm", calls)), state.diagnosis.findings[0]).run()


def test_a_crashed_attempt_s_model_calls_are_not_paid_again(tmp_path: Path, engine: Path) -> None:
    script = [reply(None, call("read_file", path=BACKEND)), read_then_fix]
    first, _, store, state = converse(tmp_path, engine, script)
    store.supersede_after("s-llm", 0)  # as on resume after a kill inside propose
    # the same state (its endpoint is gone now): every model call is answered from the record
    again = Conversation(state, runtime(LiveDoor("s-llm", store)), state.diagnosis.findings[0]).run()
    assert again.proposal == first.proposal, again.reason
    live = store.tool_calls("s-llm")
    assert [c.reused_from for c in live if c.name == "llm.chat"] == [1, 3]


def test_an_edit_next_to_the_instrumentation_is_checked_against_the_tree_it_will_meet(
    tmp_path: Path, engine: Path
) -> None:
    """The dormant profiler decorates forward_decode; the model never sees it, and an edit right at
    the decorated line passes `git apply --check` against the tree without it (and applies there)."""
    from state.door.calls import InstrumentArgs, RemoveInstrumentationArgs
    from tools.workspace import repo as repo_tools

    runner = "mla_server/model_runner.py"
    record = repo_tools.instrument(
        InstrumentArgs(repo=engine, relpath=runner, class_name="ModelRunner", method="forward_decode")
    )
    old = "    def forward_decode(self, batch):\n"
    new = "    def forward_decode(self, batch):  # decode step\n"

    def answer(body: dict) -> dict:
        assert "perfloop-instrumentation" not in last_tool_text(body)
        return reply(f"Comment.\n{edit_block(runner, old, new)}")

    outcome, _, _, _ = converse(tmp_path, engine, [reply(None, call("read_file", path=runner)), answer])
    assert outcome.proposal is not None, outcome.reason
    repo_tools.remove_instrumentation(RemoveInstrumentationArgs(repo=engine, record=record))
    subprocess.run(["git", "apply", "-"], cwd=engine, input=outcome.proposal.diff, text=True, check=True)
