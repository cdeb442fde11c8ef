"""A model's launch-option answer (`LAUNCH:` lines): the command it asks for, or why not (pure), and
the candidate `propose` makes of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.proposer.briefing.prompt import attempt
from agent.proposer.edits.launching import is_launch_answer, launch_answer
from agent.steps.propose import propose
from state.proposers.proposer import ModelTrial
from state.sessions.loop import Proposal
from tests.llm.conftest import fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, reply
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor

K: dict[str, Any] = {"kind": "mla_server", "extra": ["--enable-mixed-chunk", "--kv-pool-tokens"]}
"""The demo's allowlist, with two flags a target file adds (`[proposer] launch_flags`)."""
ARGV = ["bash", "launch.sh", "--port", "{port}", "--preset", "cpu", "--disable-cuda-graph", "--api-key", "s3"]


def test_set_and_drop_lines_edit_the_current_launch_command() -> None:
    answer = (
        "The pool is 6x what the workload needs.\n```\nLAUNCH: set --max-total-tokens 4096\n"
        "LAUNCH: drop --disable-cuda-graph\nLAUNCH: set --preset glm5\n```\n"
    )
    assert is_launch_answer(answer) and not is_launch_answer("LAUNCH the server\nx.py\n")
    found = launch_answer(answer, ARGV, [], **K)
    assert not isinstance(found, str), found
    assert found.argv == [
        "bash",
        "launch.sh",
        "--port",
        "{port}",
        "--preset",
        "glm5",
        "--api-key",
        "s3",
        "--max-total-tokens",
        "4096",
    ]
    assert found.change == "--preset cpu -> glm5, drop --disable-cuda-graph, add --max-total-tokens 4096"
    assert found.rationale.startswith("The pool is 6x") and "LAUNCH" not in found.rationale
    bare = launch_answer("LAUNCH: set --enable-mixed-chunk", ARGV, [], **K)
    assert not isinstance(bare, str) and bare.argv == [*ARGV, "--enable-mixed-chunk"]


def test_what_cannot_be_used_is_said_to_the_model() -> None:
    cases = {
        "LAUNCH: set --port 1": "--port is fixed",
        "LAUNCH: set --api-key x": "--api-key is not yours to change",
        "LAUNCH: drop --cuda-graph-max-bs": "--cuda-graph-max-bs is not in the launch command",
        "LAUNCH: raise --x 2": "write `LAUNCH: set --flag [value]` or `LAUNCH: drop --flag`",
        "LAUNCH: set x 2": "name one flag starting with `--`",
        "LAUNCH: set --preset cpu": "change nothing",
        "LAUNCH: set --a 'b": "cannot be read",
    }
    for answer, why in cases.items():
        found = launch_answer(answer, ARGV, [], **K)
        assert isinstance(found, str) and why in found, (answer, found)


def test_a_launch_command_already_tried_is_refused_and_shown_as_such() -> None:
    tried = ModelTrial(
        iteration=1,
        candidate="llm",
        verdict="failed",
        diff="",
        feedback=["failed: server failed after the patch: exited 2"],
        launch_argv=[*ARGV, "--kv-pool-tokens", "4096"],
    )
    again = launch_answer("LAUNCH: set --kv-pool-tokens 4096", ARGV, [tried], **K)
    assert isinstance(again, str) and "same as your candidate llm of iteration 1" in again
    assert "failed: server failed after the patch" in again and "not launched again" in again
    shown = attempt(tried)
    assert "the launch command it ran with:" in shown and "--kv-pool-tokens 4096" in shown
    assert "s3" not in shown and "  the patch:\n" not in shown  # the key masked; no empty diff shown


def test_a_launch_command_another_host_is_trying_is_sent_back() -> None:
    first = launch_answer("LAUNCH: set --max-total-tokens 4096", ARGV, [], **K)
    assert not isinstance(first, str)
    sibling = Proposal(
        iteration=1,
        source="llm-1",
        title="t",
        explanation="e",
        diff="",
        files=[],
        expected_gain_share=0.0,
        expected_gain_ms=None,
        evidence=[],
        launch_argv=first.argv,
    )
    again = launch_answer("LAUNCH: set --max-total-tokens 4096", ARGV, [], [sibling], **K)
    assert isinstance(again, str) and "same as candidate llm-1, which another host is already trying" in again
    other = launch_answer("LAUNCH: set --max-total-tokens 8192", ARGV, [], [sibling], **K)
    assert not isinstance(other, str) and other.argv[-1] == "8192"


def test_propose_turns_launch_lines_into_a_launch_candidate_only_when_the_target_allows(
    tmp_path: Path, engine: Path
) -> None:
    """The real `propose` against the scripted server: with `launch_options` the system prompt
    offers LAUNCH lines and the answer becomes a candidate with a launch command and no diff;
    without it the same answer has no edit blocks and is sent back."""
    answer = "The pool is 6x the workload.\nLAUNCH: set --max-total-tokens 4096\n"
    with ScriptedModel([reply(answer)]) as m:
        state = loop_state(tmp_path, engine, m.base_url, launch_options=True)
        cmd = propose(state, runtime(LiveDoor("s", MemoryRecorder())))
    assert "LAUNCH: set --flag value" in m.requests[0]["messages"][0]["content"]
    p = (cmd.update or {})["proposal"]
    assert p.diff == "" and p.files == [] and p.launch_argv == [*state.argv, "--max-total-tokens", "4096"]
    assert p.origin.rationale == "The pool is 6x the workload." and p.title == "The pool is 6x the workload."
    with ScriptedModel([reply(answer), reply(fix_answer())]) as m:
        cmd = propose(loop_state(tmp_path, engine, m.base_url), runtime(LiveDoor("s", MemoryRecorder())))
    assert "LAUNCH" not in m.requests[0]["messages"][0]["content"]
    assert "no edit blocks found" in m.requests[1]["messages"][-1]["content"]
    p = (cmd.update or {})["proposal"]
    assert p.launch_argv is None and "kv = k_buffer[kv_indices].to(q.dtype)" in p.diff


def test_a_session_recorded_before_the_allowlist_gets_it_live(tmp_path: Path, engine: Path) -> None:
    """Issue 46: no permissive fallback. A session whose options predate the allowlist
    (`launch_allowlist` False: any flag but the fixed ones) is held to its kind's allowlist when it
    runs live; only a replay of its recording takes the old path, so it decides as it did."""
    answers: list[Any] = [
        reply("Log more.\nLAUNCH: set --log-level-http debug\n"),
        reply("LAUNCH: set --max-total-tokens 4096\n"),
    ]
    with ScriptedModel(answers) as m:
        state = loop_state(tmp_path, engine, m.base_url, launch_options=True)
        assert state.options.launch_allowlist is False
        cmd = propose(state, runtime(LiveDoor("s", MemoryRecorder())))
    assert "--log-level-http" in m.requests[1]["messages"][-1]["content"]
    p = (cmd.update or {})["proposal"]
    assert p.launch_argv == [*state.argv, "--max-total-tokens", "4096"]
