"""Steps that judge a candidate: measure it, then accept or roll back."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.actions import measure_server
from agent.context import LoopContext, need, step, transition
from agent.judge import judge
from state.loop import Decision, LoopState


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
    p, commit = need(state.proposal, "proposal"), need(state.pending_commit, "pending commit")
    ok, reason, noise = judge(reference, candidate)
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
        commit=commit.sha if ok else None,
        edited=state.edited,
    )
    update = {"decisions": [decision], "transitions": transition("decide", f"{decision.verdict}: {reason}")}
    if not ok:
        return Command(update=update, goto="rollback")
    update |= {
        "accepted": [*state.accepted, commit],
        "reference": candidate,
        "pending_commit": None,
        "proposal": None,
        "iteration": state.iteration + 1,
    }
    if state.iteration + 1 > state.options.max_iterations:
        update["stop_reason"] = f"reached --max-iterations {state.options.max_iterations}"
        return Command(update=update, goto="finish")
    return Command(update=update, goto="profile")
