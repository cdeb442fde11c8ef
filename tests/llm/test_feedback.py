"""Rounds with feedback: a rejected model patch's trial goes back to the model, and the same patch
sent again is refused before anything is launched."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.proposer.briefing.feedback import divergence, same_diff, trial_of
from agent.steps.propose import propose
from state.measurement.measure import RequestRecord
from state.proposers.proposer import LlmOrigin, LlmUsage
from state.sessions.loop import Decision, Proposal
from tests.llm.conftest import NEW, fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, Step, reply
from tests.recorders import MemoryRecorder
from tools.client.stats import summarize
from tools.door.live import LiveDoor

pytestmark = pytest.mark.timeout(60)

DIFF = """\
diff --git a/m.py b/m.py
--- a/m.py
+++ b/m.py
@@ -1,2 +1,2 @@
 def f(x):
-    return x.to(q)
+    return x[i].to(q)
"""


def measured(text: str, tpot: float):
    records = [
        RequestRecord(prompt_index=0, ttft_ms=50.0, itl_ms=[tpot] * 3, text="same", completion_tokens=4),
        RequestRecord(prompt_index=1, ttft_ms=50.0, itl_ms=[tpot] * 3, text=text, completion_tokens=4),
    ]
    return summarize("m", "tree", records, 2, wall_s=1.0)


def rejected_state(tmp_path: Path, engine: Path, base_url: str):
    """The state `rollback` sees after the output gate rejected the model's patch `DIFF`."""
    state = loop_state(tmp_path, engine, base_url)
    proposal = Proposal(
        iteration=1,
        source="llm",
        title="t",
        explanation="e",
        diff=DIFF,
        files=["m.py"],
        expected_gain_share=0.0,
        expected_gain_ms=None,
        evidence=[],
        proposer="llm",
        origin=LlmOrigin(model="scripted-coder", rationale="r", usage=LlmUsage()),
    )
    decision = Decision(
        iteration=1, source="llm", verdict="rejected", reason="outputs changed for 1/2 prompt(s)"
    )
    measure = state.target.measure.model_copy(update={"prompts": ["Hello", "The capital of France"]})
    return state.model_copy(
        update={
            "target": state.target.model_copy(update={"measure": measure}),
            "proposal": proposal,
            "decisions": [decision],
            "reference": measured("is Paris. It is", 30.0),
            "candidate_measurement": measured("is Paris, it was", 10.0),
        }
    )


def test_divergence_names_the_prompt_the_position_and_both_texts() -> None:
    (line,) = divergence(["a", "The capital of"], ["x", "Paris is big"], ["x", "Paris was big"])
    assert line == (
        "prompt 2 ('The capital of'): outputs diverge at character 6 (word 2): "
        "expected 'Paris is big', got 'Paris was big'"
    )
    assert divergence(["a"], ["same"], ["same"]) == []


def test_whitespace_alone_does_not_make_a_patch_new() -> None:
    assert same_diff(DIFF, DIFF.replace("+    return x[i].to(q)", "+        return x[i].to( q )\n+"))
    assert not same_diff(DIFF, DIFF.replace("x[i]", "x[j]"))


def test_a_rejected_model_patch_is_kept_with_what_its_trial_showed(tmp_path: Path, engine: Path) -> None:
    trial = trial_of(rejected_state(tmp_path, engine, "http://127.0.0.1:9/v1"))
    assert trial is not None and trial.diff == DIFF and trial.verdict == "rejected"
    assert trial.feedback[0] == "rejected: outputs changed for 1/2 prompt(s)"
    assert trial.feedback[1].startswith("median TPOT 30.00 -> 10.00 ms (3.00x)")
    assert trial.feedback[2].startswith("prompt 2 ('The capital of France'): outputs diverge at character 8")
    assert "expected 'is Paris. It is', got 'is Paris, it was'" in trial.feedback[2]


def with_model(state, base_url: str):
    cfg = state.target.proposer.model_copy(update={"base_url": base_url})
    return state.model_copy(update={"target": state.target.model_copy(update={"proposer": cfg})})


def test_the_next_round_is_told_and_a_resubmission_costs_no_launch(tmp_path: Path, engine: Path) -> None:
    """The next round's request carries the rejected diff and where outputs diverged; the same patch
    again (re-indented comment) is sent back by the distinct check, before any launch."""
    with ScriptedModel([reply(fix_answer())]) as m:
        state = rejected_state(tmp_path, engine, m.base_url)
        fix = propose(state, runtime(LiveDoor("s", MemoryRecorder()))).update["proposal"]
    rejected = trial_of(
        state.model_copy(update={"proposal": state.proposal.model_copy(update={"diff": fix.diff})})
    )
    assert rejected is not None
    state = state.model_copy(
        update={"model_trials": [rejected], "proposal": None, "candidate_measurement": None}
    )
    other = NEW.replace("# gather the request's rows", "# gather rows")
    script: list[Step] = [
        reply(fix_answer(new=NEW.replace("  # gather", "    # gather"))),
        reply(fix_answer(new=other)),
    ]
    with ScriptedModel(script) as m:
        cmd = propose(with_model(state, m.base_url), runtime(LiveDoor("s", MemoryRecorder())))
    assert len(m.requests) == 2 and cmd.goto == "approve"
    context = m.requests[0]["messages"][1]["content"]
    assert "Your earlier patches in this session were tried and not kept" in context
    assert "rejected: outputs changed for 1/2 prompt(s)" in context
    assert "outputs diverge at character 8 (word 2): expected 'is Paris. It is'" in context
    assert "+            kv = k_buffer[kv_indices].to(q.dtype)  # gather" in context  # the diff, as data
    refusal = m.requests[1]["messages"][-1]["content"]
    assert "distinct check failed" in refusal and "same as your candidate llm of iteration 1" in refusal
    assert "not launched again" in refusal
    assert cmd.update["proposal"].origin.repairs == 1 and "# gather rows" in cmd.update["proposal"].diff


def test_a_crash_goes_back_with_the_traceback_tail_read_through_the_door(
    tmp_path: Path, engine: Path
) -> None:
    from agent.proposer.briefing.feedback import model_trial

    log = tmp_path / "server-2.log"
    log.write_text(
        "starting\nTraceback (most recent call last):\n  File \"m.py\", line 3\nNameError: name 'kv' is not defined\n"
    )
    state = rejected_state(tmp_path, engine, "http://127.0.0.1:9/v1")
    crash = Decision(
        iteration=1,
        source="llm",
        verdict="failed",
        reason=f"server failed after the patch: server exited with code 1 during start-up (log {log}): NameError",
    )
    state = state.model_copy(update={"decisions": [crash], "candidate_measurement": None})
    recorder = MemoryRecorder()
    (trial,) = model_trial(state, runtime(LiveDoor("s", recorder)))
    assert trial.verdict == "failed" and trial.feedback[0].startswith("failed: server failed after the patch")
    assert trial.feedback[-1].endswith("File \"m.py\", line 3\nNameError: name 'kv' is not defined")
    assert [c.name for c in recorder.calls] == ["code.log_tail"]
