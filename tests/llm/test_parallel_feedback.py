"""Feedback from trials on parallel hosts: a model candidate tried on one of the `[[hosts]]` and not
kept reaches the model's next round as a trial on the session's own host does (its diff, the
verdict with speedup and CI, where outputs diverged, a crash's log tail read on its host), and the
same patch sent again is refused before any launch; one accepted on its host but outpaced by a
faster one is recorded too, and may be sent again. The real `verdict`, `TrialRun.log_tail`,
`join` and `propose`; the model is the scripted OpenAI-compatible server over real HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.types import Command

from agent.proposer.edits.blocks import unified_diff
from agent.steps.fanout import task
from agent.steps.propose import propose
from agent.steps.trial import TrialRun, join, verdict
from state.config.target import TrialHost
from state.measurement.trials import Trial
from state.proposers.proposer import LlmOrigin, LlmUsage
from state.sessions.loop import LoopState, Proposal
from tests.llm.conftest import BACKEND, NEW, OLD, WRONG, edit_block, fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, Step, reply
from tests.llm.test_feedback import measured
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor

pytestmark = pytest.mark.timeout(60)

HINT = ("import torch\n", "import torch\n\n# a hint\n")
"""llm-2's patch: a comment, no faster."""
OTHER = ("import torch\n", "import torch  # the model's tensors\n")


def two_hosts(tmp_path: Path, engine: Path, base_url: str = "http://127.0.0.1:9/v1") -> LoopState:
    state = loop_state(tmp_path, engine, base_url)
    hosts = [TrialHost(name=n, repo=tmp_path / n) for n in "ab"]
    measure = state.target.measure.model_copy(update={"prompts": ["Hello", "The capital of France"]})
    target = state.target.model_copy(update={"hosts": hosts, "measure": measure})
    return state.model_copy(update={"target": target})


def candidate(source: str, diff: str, model: bool = True) -> Proposal:
    origin = LlmOrigin(model="scripted-coder", rationale="r", usage=LlmUsage()) if model else None
    return Proposal(
        iteration=1,
        source=source,
        title=source,
        explanation="e",
        diff=diff,
        files=[BACKEND],
        expected_gain_share=0.0,
        expected_gain_ms=None,
        evidence=[],
        proposer="llm" if model else "playbook",
        origin=origin,
    )


def propose_with(state: LoopState, script: list[Step]) -> tuple[Command, list[dict]]:
    """The real `propose` on `state`, its model the scripted server answering `script`; what it
    returned and the requests the server got."""
    with ScriptedModel(script) as m:
        base = state.target.proposer.model_copy(update={"base_url": m.base_url})
        state = state.model_copy(update={"target": state.target.model_copy(update={"proposer": base})})
        return propose(state, runtime(LiveDoor("s", MemoryRecorder()))), m.requests


def patched(engine: Path, old: str, new: str) -> str:
    text = (engine / BACKEND).read_text()
    return unified_diff({BACKEND: text}, {BACKEND: text.replace(old, new, 1)})


def test_a_hosts_verdict_on_a_model_candidate_says_where_outputs_diverged(
    tmp_path: Path, engine: Path
) -> None:
    state = two_hosts(tmp_path, engine)
    ref, cand = measured("is Paris. It is", 30.0), measured("is Paris, it was", 10.0)
    out = verdict(task(state, candidate("llm-2", "d"), 1, 1), ref, cand)
    assert out["verdict"] == "rejected" and "outputs" in out["reason"], out
    (line,) = out["feedback"]
    assert line.startswith("prompt 2 ('The capital of France'): outputs diverge at character 8 (word 2)")
    assert "expected 'is Paris. It is', got 'is Paris, it was'" in line
    assert verdict(task(state, candidate("p", "d", model=False), 1, 1), ref, cand)["feedback"] == []


def test_a_crashed_candidates_log_tail_is_read_on_its_host(tmp_path: Path, engine: Path) -> None:
    state = two_hosts(tmp_path, engine)
    log = tmp_path / "iteration-1-llm-2-candidate.log"
    log.write_text("starting\nTraceback (most recent call last):\nNameError: name 'kv' is not defined\n")
    recorder = MemoryRecorder()
    door = LiveDoor("s", recorder)
    for model, told in ((False, []), (True, ["server log tail:"])):
        t = task(state, candidate("llm-2", "d", model), 1, 1)
        run = TrialRun(t, door.branch("trial@b", t.host.host, None))
        run.phase, run.log = "candidate", log
        assert [line.split("\n")[0] for line in run.log_tail()] == told
    assert run.log_tail()[0].endswith("NameError: name 'kv' is not defined")
    run.phase = "host"  # the host's own baseline failed: not the candidate's doing
    assert run.log_tail() == []
    run.phase, run.log = "candidate", None  # the patch did not apply: no server of its own
    assert run.log_tail() == []
    assert [(c.node, c.name) for c in recorder.calls] == [("trial@b", "code.log_tail")] * 2


def test_the_next_round_is_told_what_each_hosts_trial_showed(tmp_path: Path, engine: Path) -> None:
    """llm-1 changed outputs on host a, llm-2 gained nothing on host b: `join` keeps neither and
    records both; the next round's two conversations are shown both diffs with their verdicts,
    speedup and CI and the divergence, and each resubmission is refused before any launch."""
    wrong, hint = patched(engine, OLD, WRONG), patched(engine, *HINT)
    tried = [candidate("llm-1", wrong), candidate("llm-2", hint)]
    diverged = "prompt 2 ('The capital of France'): outputs diverge at character 8 (word 2)"
    trials = [
        Trial(
            iteration=1,
            playbook="llm-1",
            host="a",
            attempt=1,
            status="measured",
            verdict="rejected",
            reason="outputs changed for 1/2 prompt(s)",
            feedback=[diverged + ": expected 'is Paris. It is', got 'is Paris, it was'"],
        ),
        Trial(
            iteration=1,
            playbook="llm-2",
            host="b",
            attempt=1,
            status="measured",
            verdict="inconclusive",
            reason="TPOT 30.0 -> 29.8 ms, 1.01x [0.95, 1.07]",
            speedup=1.01,
            ci=[0.95, 1.07],
        ),
    ]
    state = two_hosts(tmp_path, engine).model_copy(update={"candidates": tried, "trials": trials})
    cmd = join(state, runtime(LiveDoor("s", MemoryRecorder())))
    assert cmd.goto == "propose"
    update = cmd.update or {}
    told = {t.candidate: t for t in update["model_trials"]}
    assert told["llm-1"].diff == wrong and told["llm-1"].verdict == "rejected"
    assert told["llm-1"].feedback[1].startswith("on a: " + diverged)
    assert told["llm-2"].feedback == ["inconclusive: trial on b: TPOT 30.0 -> 29.8 ms, 1.01x [0.95, 1.07]"]
    after = state.model_copy(
        update={"decisions": update["decisions"], "model_trials": update["model_trials"], "candidates": []}
    )
    script: list[Step] = [
        reply(fix_answer(new=WRONG)),  # conversation 1: llm-1's patch again, refused
        reply(fix_answer()),
        reply("Add a hint.\n" + edit_block(BACKEND, *HINT)),  # conversation 2: llm-2's again, refused
        reply("Name the import.\n" + edit_block(BACKEND, *OTHER)),
    ]
    cmd, requests = propose_with(after, script)
    assert len(requests) == 4
    for first in (requests[0], requests[2]):
        context = first["messages"][1]["content"]
        assert "Your earlier patches in this session were tried and not kept" in context
        assert "- llm-1 (iteration 1): rejected" in context and "on a: " + diverged in context
        assert "- llm-2 (iteration 1): inconclusive" in context and "1.01x [0.95, 1.07]" in context
        assert "+# a hint" in context and "kv_indices[-4:]" in context  # both diffs, as data
    for refused, which in ((requests[1], "llm-1"), (requests[3], "llm-2")):
        text = refused["messages"][-1]["content"]
        assert f"same as your candidate {which} of iteration 1" in text and "not launched again" in text
    proposals = (cmd.update or {}).get("candidates") or []
    assert [p.source for p in proposals] == ["llm-1", "llm-2"], cmd
    assert "kv = k_buffer[kv_indices].to(q.dtype)" in proposals[0].diff and "tensors" in proposals[1].diff


def test_a_model_candidate_accepted_but_outpaced_is_told_and_may_be_sent_again(
    tmp_path: Path, engine: Path
) -> None:
    """llm-1 and llm-2 are both accepted on their hosts; llm-1 is faster and kept. llm-2 gets a
    record all the same (its diff, verdict, speedup and CI, and that llm-1 was kept instead); the
    next round is shown it apart from the refused ones, and sending it again is not refused."""
    fix, hint = patched(engine, OLD, NEW), patched(engine, *HINT)
    tried = [candidate("llm-1", fix), candidate("llm-2", hint)]
    trials = [
        Trial(
            iteration=1,
            playbook=pb,
            host=host,
            attempt=1,
            status="measured",
            verdict="accepted",
            reason=f"TPOT 30.0 -> {30 / x:.1f} ms, {x:.2f}x [{lo:.2f}, {hi:.2f}]",
            speedup=x,
            ci=[lo, hi],
        )
        for pb, host, x, lo, hi in (("llm-1", "a", 3.1, 2.5, 3.8), ("llm-2", "b", 1.4, 1.1, 1.7))
    ]
    state = two_hosts(tmp_path, engine).model_copy(update={"candidates": tried, "trials": trials})
    cmd = join(state, runtime(LiveDoor("s", MemoryRecorder())))
    update = cmd.update or {}
    assert cmd.goto == "cleanup" and update["proposal"].source == "llm-1"
    assert update["decisions"] == []  # llm-2 was not decided on: it was never tried on top of llm-1
    (told,) = update["model_trials"]
    assert (told.candidate, told.verdict, told.kept_instead, told.diff) == (
        "llm-2",
        "accepted",
        "llm-1",
        hint,
    )
    assert told.feedback == [
        "accepted on b: TPOT 30.0 -> 21.4 ms, 1.40x [1.10, 1.70]; but llm-1 was faster (3.10x on a) "
        "and was kept instead: this patch was not applied"
    ]
    after = state.model_copy(
        update={"model_trials": update["model_trials"], "candidates": [], "trials": [], "iteration": 2}
    )
    script: list[Step] = [
        reply("Add the hint again.\n" + edit_block(BACKEND, *HINT)),  # llm-2's patch: not refused
        reply("Name the import.\n" + edit_block(BACKEND, *OTHER)),
    ]
    cmd, requests = propose_with(after, script)
    assert len(requests) == 2
    context = requests[0]["messages"][1]["content"]
    assert "were tried and not kept" not in context
    assert "accepted on their host but not kept, because another candidate" in context
    assert "- llm-2 (iteration 1): accepted" in context and "1.40x [1.10, 1.70]" in context
    assert "llm-1 was faster (3.10x on a)" in context and "+# a hint" in context
    proposals = (cmd.update or {}).get("candidates") or []
    assert [p.source for p in proposals] == ["llm-1", "llm-2"], cmd
    assert "+# a hint" in proposals[0].diff and "tensors" in proposals[1].diff
