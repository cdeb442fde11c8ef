"""Steps that judge a candidate: measure it, then accept or roll back."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, need, step, transition
from agent.decision.interleave import judge_interleaved
from agent.decision.judge import judge
from agent.decision.measuring import judge_candidate, outputs_problem, unlike
from agent.decision.mechanism import predict
from agent.steps.actions import measure_server
from state.loop import Decision, LoopState


def near_floor(tpot_ms: float, floor_ms: float | None, factor: float) -> str | None:
    """Why the loop stops at this TPOT: within `factor` of the stated floor; None otherwise (pure)."""
    if floor_ms is None or tpot_ms > factor * floor_ms:
        return None
    return f"TPOT {tpot_ms:.1f} ms is within {factor:g}x of the floor {floor_ms:g} ms ({tpot_ms / floor_ms:.1f}x)"


@step
def measure(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["decide", "abort"]]:
    """Measure the patched server with the same workload as the reference (look by look, CI rule)."""
    label = f"iteration-{state.iteration}"
    interleaved = state.options.decision_rule != "iqr-v0" and state.target.decide.arms == "interleaved"
    tolerance = None
    if state.options.decision_rule == "iqr-v0":
        m, judgement, problem = measure_server(state, runtime, label), None, None
    elif interleaved:
        m, judgement, problem, beside, tolerance = judge_interleaved(state, runtime, label)
    else:
        m, judgement, problem, tolerance = judge_candidate(state, runtime, label)
    note = (
        f"candidate TPOT {m.tpot_ms.median:.1f} ms (IQR {m.tpot_ms.iqr:.1f}), "
        f"TTFT {m.ttft_ms.median:.1f} ms, measured by {m.client}"
    )
    if judgement is not None:
        note += "; looks: " + ", ".join(
            f"{lk.look}/{lk.of} {lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}] {lk.verdict}"
            for lk in judgement.looks
        )
    elif problem is not None:
        note += f"; not timed further: {problem}"
    if tolerance is not None and tolerance.passed:
        note += f"; {tolerance.line()}"
    update: dict[str, object] = {
        "candidate": m,
        "judgement": judgement,
        "gate_problem": problem,
        "tolerance": tolerance,
        "transitions": transition("measure", note),
    }
    if interleaved:  # the reference (and a confirming pair) launched beside the candidate
        update["launches"] = state.launches + beside
        note += f"; arms interleaved, {beside} launch(es) beside the candidate"
        update["transitions"] = transition("measure", note)
    return Command(update=update, goto="decide")


def _verdict(state: LoopState, enables: str | None = None) -> tuple[str, str, float | None]:
    """(verdict, reason, noise_ms) by the session's rule (pure); `enables` names the pair an
    enabling step is kept for."""
    ref, cand, j = need(state.reference, "reference"), need(state.candidate, "candidate"), state.judgement
    if state.options.decision_rule == "iqr-v0":
        ok, reason, noise = judge(ref, cand, enables)
        return ("accepted" if ok else "rejected"), reason, noise
    if j is None:  # the output gate (or unlike arms) stopped it before any timing verdict
        problem = state.gate_problem or outputs_problem(ref, cand) or unlike(ref, cand) or "not judged"
        return "rejected", problem, None
    a, b = need(j.reference, "reference arm"), need(j.candidate, "candidate arm")
    reason = (
        f"{j.line()}; median TPOT {a.tpot_ms_median:.1f} -> {b.tpot_ms_median:.1f} ms, "
        f"ITL p50/p99 {a.itl_ms_p50:.1f}/{a.itl_ms_p99:.1f} -> {b.itl_ms_p50:.1f}/{b.itl_ms_p99:.1f} ms, "
        f"TTFT {a.ttft_ms_median:.1f} -> {b.ttft_ms_median:.1f} ms, warm-ups discarded "
        f"{a.warmups_discarded}+{b.warmups_discarded}"
    )
    if a.outliers or b.outliers:
        reason += f", outliers flagged {a.outliers}+{b.outliers}"
    reason += f", {state.tolerance.line()}" if state.tolerance is not None else ", outputs identical"
    if enables is not None and j.verdict in ("rejected", "inconclusive"):
        return "accepted", f"{reason}; no gain alone, kept as an enabling step ({enables})", None
    return j.verdict, reason, None


@step
def decide(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["profile", "rollback", "finish", "abort"]]:
    """Keep the patch only if the rule accepts it (outputs identical first); else roll it back.

    A fix the gain model predicts gains little alone and much together with another not yet tried
    is kept as an enabling step when outputs are identical and the rule finds no regression."""
    reference, candidate = need(state.reference, "reference"), need(state.candidate, "candidate")
    p, commit = need(state.proposal, "proposal"), state.pending_commit
    if p.launch_argv is None:
        need(commit, "pending commit")
    enables = (
        f"predicted {p.predicted_speedup:.2f}x alone, {p.paired_speedup:.2f}x with {p.paired_with}"
        if p.paired_with and p.paired_with not in state.tried and p.predicted_speedup is not None
        else None
    )
    verdict, reason, noise = _verdict(state, enables)
    ok = verdict == "accepted"
    if state.edited:
        reason += " (human-edited patch)"
    j = state.judgement if state.options.decision_rule != "iqr-v0" else None
    decision = Decision(
        iteration=state.iteration,
        playbook=p.playbook,
        verdict=verdict,
        reason=reason,
        tpot_ms_before=reference.tpot_ms.median,
        tpot_ms_after=candidate.tpot_ms.median,
        noise_ms=noise,
        outputs_identical=candidate.outputs == reference.outputs,
        commit=commit.sha if ok and commit else None,
        edited=state.edited,
        judgement=j,
        prediction=predict(p, state.diagnosis) if ok and j is not None else None,
        tolerance=state.tolerance,
        launch_argv=p.launch_argv,
        predicted_speedup=p.predicted_speedup,
    )
    update = {"decisions": [decision], "transitions": transition("decide", f"{decision.verdict}: {reason}")}
    if not ok:
        return Command(update=update, goto="rollback")
    diff = state.approval.diff if state.edited and state.approval is not None else p.diff
    update |= {
        "accepted": [*state.accepted, commit] if commit else state.accepted,
        "kept_diffs": [*state.kept_diffs, diff] if commit else state.kept_diffs,
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
