"""The correctness set: fresh random prompts per session, compared alone and in a batch."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph

from agent.cli.target import load_target
from agent.context import LoopContext
from agent.decision.gate.correctness import correctness_prompts, differences, refusal
from agent.sessions.summary import summarize as summarize_session
from agent.steps.patch import approve
from state.config.options import LoopOptions
from state.engines.limits import FittedPrompts, LongPrompts
from state.measurement.correctness import CorrectnessConfig, OutputsResult
from state.sessions.loop import Approval, LoopState, Proposal
from tools.door.replay import ReplayDoor
from tools.limits import stratified_lengths

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def test_random_prompts_are_per_session_and_sized_by_the_target() -> None:
    cfg = CorrectnessConfig(random_prompts=3, min_prompt_chars=50, max_prompt_chars=300)
    a = correctness_prompts("s1", ["timing"], cfg)
    assert a == correctness_prompts("s1", ["timing"], cfg)  # replay draws the same
    assert a != correctness_prompts("s2", ["timing"], cfg)  # a new session draws new ones
    assert a[0] == "timing" and len(a) == 4
    assert all(50 <= len(p) <= 300 for p in a[1:])


def test_differences_name_the_prompts_alone_and_in_the_batch() -> None:
    ref = OutputsResult(sequential=["a", "b", "c"], concurrent=["a", "b"], duration_s=1.0)
    same = OutputsResult(sequential=["a", "b", "c"], concurrent=["a", "b"], duration_s=2.0)
    named = ["timing prompt 1", "timing prompt 2", "random prompt 1"]
    assert differences(ref, same, named) is None
    bad = OutputsResult(sequential=["a", "b", "X"], concurrent=["a", "Y"], duration_s=2.0)
    assert differences(ref, bad, named) == (
        "outputs changed on the correctness set: 1/3 alone (random prompt 1); "
        "1/2 in the concurrent batch (timing prompt 2)"
    )


def test_a_long_prompt_that_differs_is_named_with_its_length_in_the_batch_too() -> None:
    ref = OutputsResult(sequential=["a", "b", "c", "d"], concurrent=["a", "c", "d"], duration_s=1.0)
    bad = OutputsResult(sequential=["a", "b", "c", "D"], concurrent=["a", "c", "D"], duration_s=1.0)
    named = ["timing prompt 1", "random prompt 1", "long prompt 1: 60 + 16 tokens of 256",
             "long prompt 2: 240 + 16 tokens of 256"]  # fmt: skip
    assert differences(ref, bad, named, [0, 2, 3]) == (
        "outputs changed on the correctness set: 1/4 alone (long prompt 2: 240 + 16 tokens of 256); "
        "1/3 in the concurrent batch (long prompt 2: 240 + 16 tokens of 256)"
    )


def test_long_prompt_lengths_are_stratified_per_session_and_end_at_the_limit() -> None:
    draws = {tuple(stratified_lengths(256, 16, 3, random.Random(s))) for s in range(40)}
    assert len(draws) > 10  # drawn afresh per seed
    for lengths in draws:
        assert len(lengths) == 3 and lengths[-1] == 240  # the last decode reaches the limit
        assert 1 <= lengths[0] <= 80 < lengths[1] <= 160
    assert stratified_lengths(256, 16, 1, random.Random(0)) == [240]
    with pytest.raises(ValueError, match="leaves no room for a prompt under the context limit 16"):
        stratified_lengths(16, 16, 3, random.Random(0))


def test_the_long_prompts_line_says_how_far_the_set_reached_or_why_not() -> None:
    fit = FittedPrompts(prompts=["x", "y"], tokens=[70, 240], requests=4, duration_s=0.25)
    lp = LongPrompts(
        limit=256, source="/v1/models max_model_len", prompts=["x", "y"], tokens=[70, 240], fit=fit
    )
    assert lp.line(16) == (
        "2 long prompts of 70/240 + 16 tokens to the context limit 256 (/v1/models max_model_len), "
        "fitted in 4 requests, 0.2 s"
    )
    unknown = LongPrompts(limit=None, source="none of /v1/models states a context limit")
    assert unknown.line(16) == (
        "the context limit is unknown (none of /v1/models states a context limit); no long prompts"
    )


def _state(tmp_path: Path, long: LongPrompts | None, **correctness: int) -> LoopState:
    target = load_target(DEMO_TOML)
    cfg = target.correctness.model_copy(update={"long_prompts": 3, **correctness})  # the demo's: 0
    return LoopState(
        session_id="s",
        target=target.model_copy(update={"correctness": cfg}),
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1", long_prompts=True),
        long_prompts=long,
    )


def test_an_unknown_limit_refuses_auto_approval_and_the_summary_says_so(tmp_path: Path) -> None:
    unknown = LongPrompts(limit=None, source="none of /get_model_info, /v1/models states a context limit")
    why = refusal(_state(tmp_path, unknown))
    assert why == (
        "auto approval refused: the context limit is unknown (none of /get_model_info, /v1/models "
        "states a context limit), so the correctness set cannot reach it; state it in the target "
        "file ([correctness] context_tokens = N)"
    )
    assert summarize_session(_state(tmp_path, unknown), "done").correctness_set == (
        "the context limit is unknown (none of /get_model_info, /v1/models states a context limit); "
        f"no long prompts; {why}"
    )
    stated = LongPrompts(limit=4096, source="[correctness] context_tokens", stated_in_target=True)
    assert refusal(_state(tmp_path, stated)) is None
    off = _state(tmp_path, None, long_prompts=0)  # turned off: nothing learned, nothing refused
    assert refusal(off) is None and summarize_session(off, "done").correctness_set == (
        "no long prompts (long_prompts = 0): checked only up to max_prompt_chars"
    )
    assert refusal(_state(tmp_path, None)) is None  # a session recorded before them
    assert summarize_session(_state(tmp_path, None), "done").correctness_set is None


def test_a_limit_leaving_no_room_for_a_prompt_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match="^max_tokens 40 leaves no room for a prompt under the context limit 40$"
    ):
        stratified_lengths(40, 40, 3, random.Random(0))


def _approve_once(state: LoopState) -> tuple[dict | None, Approval | None]:
    """Run the real `approve` step in a graph of its own: what it asked a human, or its answer."""
    g = StateGraph(LoopState, context_schema=LoopContext)
    g.add_node("approve", approve)
    for name in ("cleanup", "propose", "trial", "abort"):
        g.add_node(name, lambda s: {})
    g.add_edge(START, "approve")
    graph = g.compile(checkpointer=InMemorySaver())
    cfg: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke(state, cfg, context=LoopContext(door=ReplayDoor("s", [])))
    snapshot = graph.get_state(cfg)
    asked = [i.value for t in snapshot.tasks for i in t.interrupts]
    return (asked[0] if asked else None), LoopState.model_validate(snapshot.values).approval


def test_approve_auto_waits_for_a_human_where_the_limit_is_unknown(tmp_path: Path) -> None:
    patch = Proposal(
        iteration=1, source="p", title="t", explanation="", diff="", files=[], expected_gain_share=0.5,
        expected_gain_ms=None, evidence=[],
    )  # fmt: skip
    unknown = LongPrompts(limit=None, source="none of /v1/models states a context limit")
    asked, answer = _approve_once(_state(tmp_path, unknown).model_copy(update={"proposal": patch}))
    assert answer is None and asked is not None
    assert asked["auto_approval"].startswith("auto approval refused: the context limit is unknown")
    known = LongPrompts(limit=256, source="/get_server_info context_len")
    asked, answer = _approve_once(_state(tmp_path, known).model_copy(update={"proposal": patch}))
    assert asked is None and answer is not None and answer.by == "auto"
