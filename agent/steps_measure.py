"""Steps that judge a candidate: measure it, then accept or roll back."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.actions import measure_server
from agent.context import LoopContext, need, step, transition
from agent.judge import judge
from state.loop import Decision, LoopState


def near_floor(tpot_ms: float, floor_ms: float | None, factor: float) -> str | None:
    """Why the loop stops at this TPOT: within `factor` of the stated floor; None otherwise (pure)."""
    if floor_ms is None or tpot_ms > factor * floor_ms:
        return None
    return f"TPOT {tpot_ms:.1f} ms is within {factor:g}x of the floor {floor_ms:g} ms ({tpot_ms / floor_ms:.1f}x)"


@step
def measure(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["decide", "abort"]]:
    """Measure the patched server with the same workload as the reference."""
    m = measure_server(state, runtime, f"iteration-{state.iteration}")
    note = (
        f"candidate TPOT {m.tpot_ms.median:.1f} ms (IQR {m.tpot_ms.iqr:.1f}), "
        f"TTFT {m.ttft_ms.median:.1f} ms, measured by {m.client}"
    )
    return Command(update={"candidate": m, "transitions": transition("measure", note)}, goto="decide")


@step
def decide(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["profile", "rollback", "finish", "abort"]]:
    """Accept if faster beyond noise with identical outputs; then profile again or stop."""
    reference, candidate = need(state.reference, "reference"), need(state.candidate, "candidate")
    p, commit = need(state.proposal, "proposal"), state.pending_commit
    if p.launch_argv is None:
        need(commit, "pending commit")
    enables = (
        f"predicted {p.predicted_speedup:.2f}x alone, {p.paired_speedup:.2f}x with {p.paired_with}"
        if p.paired_with and p.paired_with not in state.tried and p.predicted_speedup is not None
        else None
    )
    ok, reason, noise = judge(reference, candidate, enables)
    if state.edited:
        reason += " (human-edited patch)"
    decision = Decision(
        iteration=state.iteration,
        playbook=p.playbook,
        verdict="accepted" if ok else "rejected",
        reason=reason,
        tpot_ms_before=reference.tpot_ms.median,
        tpot_ms_after=candidate.tpot_ms.median,
        noise_ms=noise,
        outputs_identical=candidate.outputs == reference.outputs,
        commit=commit.sha if ok and commit else None,
        edited=state.edited,
        launch_argv=p.launch_argv,
        predicted_speedup=p.predicted_speedup,
    )
    update = {"decisions": [decision], "transitions": transition("decide", f"{decision.verdict}: {reason}")}
    if not ok:
        return Command(update=update, goto="rollback")
    update |= {
        "accepted": [*state.accepted, commit] if commit else state.accepted,
        "launch_argv": state.pending_launch or state.launch_argv,
        "pending_launch": None,
        "reference": candidate,
        "pending_commit": None,
        "proposal": None,
        "iteration": state.iteration + 1,
    }
    if state.iteration + 1 > state.options.max_iterations:
        update["stop_reason"] = f"reached --max-iterations {state.options.max_iterations}"
        return Command(update=update, goto="finish")
    near = near_floor(candidate.tpot_ms.median, state.options.floor_ms, state.options.floor_factor)
    if near is not None:
        update["stop_reason"] = near
        return Command(update=update, goto="finish")
    return Command(update=update, goto="profile")
