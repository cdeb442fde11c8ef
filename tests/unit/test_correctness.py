"""The correctness set: fresh random prompts per session, compared alone and in a batch."""

from __future__ import annotations

from agent.decision.correctness import correctness_prompts, differences
from state.decision import OutputsResult
from state.target import CorrectnessConfig


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
    assert differences(ref, same, 2) is None
    bad = OutputsResult(sequential=["a", "b", "X"], concurrent=["a", "Y"], duration_s=2.0)
    assert differences(ref, bad, 2) == (
        "outputs changed on the correctness set: 1/3 alone (random prompt 1); "
        "1/2 in the concurrent batch (timing prompt 2)"
    )
