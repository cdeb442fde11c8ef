"""What a tried model candidate showed, kept for the model's next rounds (pure).

`rollback` calls `trial_of` for a model-written candidate that was not kept: its diff, the
decision's verdict and reason, the speedup and its CI, where the outputs first diverged from the
reference (prompt, position, expected vs got), a crash's log tail. The next conversation is
shown all of it (`prompt.attempts`), and a resubmission of the same diff, whitespace aside, is
refused before any launch (`already_tried`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext, call
from state.proposers.llm_tools import LogArgs
from state.proposers.proposer import ModelTrial
from state.sessions.loop import LoopState
from tools.llm import code

CONTEXT_CHARS = 40
"""Characters of output shown either side of the first divergence."""


def _word_at(text: str, pos: int) -> int:
    """1-based index of the whitespace-separated word holding character `pos` (pure)."""
    return max(1, len(text[: pos + 1].split()))


def divergence(prompts: list[str], expected: list[str], got: list[str]) -> list[str]:
    """Where the candidate's outputs first differ from the reference's, one line per differing
    prompt (at most three), e.g. `prompt 2 ('The capital of'): outputs diverge at character 14
    (word 3): expected '...Paris is', got '...Paris, is'` (pure)."""
    lines = []
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a == b:
            continue
        pos = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        lo = max(0, pos - CONTEXT_CHARS)
        prompt = prompts[i] if i < len(prompts) else "?"
        lines.append(
            f"prompt {i + 1} ({prompt[:60]!r}): outputs diverge at character {pos} (word "
            f"{_word_at(a, pos)}): expected {a[lo : pos + CONTEXT_CHARS]!r}, got {b[lo : pos + CONTEXT_CHARS]!r}"
        )
        if len(lines) == 3:
            break
    return lines


def trial_of(state: LoopState, log_tail: str = "") -> ModelTrial | None:
    """The record of the current model proposal's trial, from its decision (the last one naming
    it) and the measurements still in the state; None for a playbook's or an unjudged proposal."""
    p = state.proposal
    if p is None or p.origin is None:
        return None
    decision = next((d for d in reversed(state.decisions) if d.source == p.source), None)
    if decision is None or decision.verdict == "accepted":
        return None
    lines = [f"{decision.verdict}: {decision.reason.splitlines()[0] if decision.reason else ''}"]
    ref, cand = state.reference, state.candidate_measurement
    if ref is not None and cand is not None:
        speed = ref.tpot_ms.median / cand.tpot_ms.median if cand.tpot_ms.median > 0 else 0.0
        lines.append(
            f"median TPOT {ref.tpot_ms.median:.2f} -> {cand.tpot_ms.median:.2f} ms ({speed:.2f}x)"
            + (f"; CI rule: {state.judgement.line()}" if state.judgement is not None else "")
        )
        if cand.outputs != ref.outputs:
            lines += divergence(state.target.measure.prompts, ref.outputs, cand.outputs)
    if state.gate_problem:
        lines.append(f"output gate: {state.gate_problem}")
    if state.tolerance is not None:
        lines.append(f"tolerance gate: {state.tolerance.line()}")
    lines += [
        f"mechanism: {m.note}"
        for m in state.mechanisms
        if (m.iteration, m.playbook) == (p.iteration, p.source)
    ]
    if log_tail:
        lines.append("server log tail:\n" + log_tail)
    return ModelTrial(
        iteration=state.iteration,
        candidate=p.source,
        verdict=decision.verdict,
        diff=p.diff,
        feedback=lines,
        launch_argv=p.launch_argv,
    )


def model_trial(state: LoopState, runtime: Runtime[LoopContext]) -> list[ModelTrial]:
    """`trial_of` for `rollback`, with the tail of the server's log when the candidate crashed
    it (read through the door: `code.log_tail`); [] for a playbook's proposal."""
    p = state.proposal
    if p is None or p.origin is None:
        return []
    last = next((d for d in reversed(state.decisions) if d.source == p.source), None)
    found = re.search(r"\(log (\S+)\)", last.reason) if last and last.verdict == "failed" else None
    tail = ""
    if found is not None:
        result = call(runtime, code.log_tail, LogArgs(path=Path(found[1])))
        tail = result.text if result.ok else ""
    trial = trial_of(state, tail)
    return [trial] if trial is not None else []


def _changes(diff: str) -> list[str]:
    """The diff's file names and changed lines with all whitespace removed (pure)."""
    keep = [ln for ln in diff.splitlines() if ln.startswith(("+", "-")) or ln.startswith("diff --git")]
    return [re.sub(r"\s+", "", ln) for ln in keep if re.sub(r"\s+", "", ln) not in {"+", "-"}]


def same_diff(a: str, b: str) -> bool:
    """Whether two diffs make the same change, whitespace and blank lines aside (pure)."""
    return _changes(a) == _changes(b)


def already_tried(trials: Sequence[ModelTrial], diff: str) -> ModelTrial | None:
    """The earlier candidate whose patch `diff` repeats (`same_diff`), one that was not accepted
    (an accepted one that lost to a faster candidate may be tried again, on top of it) (pure)."""
    return next((t for t in trials if t.kept_instead is None and same_diff(t.diff, diff)), None)
