"""Steps that judge a candidate: measure it, then accept or roll back."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, need, step, transition
from agent.decision.arms.arms import arms_in_use
from agent.decision.arms.interleave import confirming_line
from agent.decision.arms.measuring import beside_note, serving_note, texts_compared
from agent.decision.rules import rule_for
from agent.decision.stats.mechanism import past_bound, predict
from state.measurement.decision import Look
from state.measurement.numerics import NumericsVerdict
from state.measurement.tolerance import ToleranceResult
from state.sessions.loop import Decision, LoopState
from state.sessions.updates import LoopUpdate


def near_floor(tpot_ms: float, floor_ms: float | None, factor: float) -> str | None:
    """Why the loop stops at this TPOT: within `factor` of the stated floor; None otherwise (pure)."""
    if floor_ms is None or tpot_ms > factor * floor_ms:
        return None
    return f"TPOT {tpot_ms:.1f} ms is within {factor:g}x of the floor {floor_ms:g} ms ({tpot_ms / floor_ms:.1f}x)"


def relaunches_note(state: LoopState, launches: int) -> str:
    """`arms alternating, 3 more launch(es), one server at a time`, or cross-host arms' (pure)."""
    if arms_in_use(state) != "cross-host":
        return f"arms alternating, {launches} more launch(es), one server at a time"
    there = state.target.decide.reference_host
    return (
        f"arms cross-host, {launches} more launch(es) here and on host {there}, one server at a time on each"
    )


def looks_words(looks: list[Look]) -> str:
    """`1/3 1.43x [1.10, 1.90] accepted, ...` (pure)."""
    return ", ".join(
        f"{lk.look}/{lk.of} {lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}] {lk.verdict}"
        for lk in looks
    )


@step
def measure(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["decide", "abort"]]:
    """Measure the patched server with the same workload as the reference (by the session's rule)."""
    judged = rule_for(state.options.decision_rule).judge(state, runtime, f"iteration-{state.iteration}")
    m, judgement = judged.measurement, judged.judgement
    note = (
        (
            f"candidate TPOT {m.tpot_ms.median:.1f} ms (IQR {m.tpot_ms.iqr:.1f}), "
            f"TTFT {m.ttft_ms.median:.1f} ms, measured by {m.client}"
        )
        + serving_note(m)
        + beside_note(m)
    )
    if judgement is not None:
        note += f"; looks: {looks_words(judgement.looks)}"
        if judgement.confirmation:  # the second pair of launches, and why it started
            why = confirming_line(judgement.looks[-1], state.target.decide.confirm_below)
            note += f"; {why}: {looks_words(judgement.confirmation)}"
    elif judged.problem is not None:
        note += f"; not timed further: {judged.problem}"
    scored = judged.tolerance
    if isinstance(scored, ToleranceResult) and scored.passed:
        note += f"; {scored.line()}"
    update: LoopUpdate = {
        "candidate_measurement": m,
        "judgement": judgement,
        "gate_problem": judged.problem,
        "tolerance": scored if isinstance(scored, ToleranceResult) else None,
        "numerics": scored if isinstance(scored, NumericsVerdict) else None,
    }
    if state.options.schedule_gate or isinstance(scored, NumericsVerdict):
        update["gate_note"] = judged.gate_note
        if judged.gate_note and judged.problem is None:
            note += f"; {judged.gate_note}"
    if judged.server != "unchanged":  # alternating, cross-host arms: the candidate relaunched, or stopped
        update["server"] = judged.server
        if judged.launches_beside is not None:
            update["launches"] = state.launches + judged.launches_beside
            note += f"; {relaunches_note(state, judged.launches_beside)}"
    elif judged.launches_beside is not None:  # the reference (and a confirming pair) launched beside it
        update["launches"] = state.launches + judged.launches_beside
        note += f"; arms interleaved, {judged.launches_beside} launch(es) beside the candidate"
    update["transitions"] = transition("measure", note)
    return Command(update=update, goto="decide")


@step
def decide(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["profile", "rollback", "chain", "finish", "abort"]]:
    """Keep the patch only if the rule accepts it (outputs identical first); else roll it back.

    A fix the gain model predicts gains little alone and much together with another not yet tried
    is kept as an enabling step when outputs are identical and the rule finds no regression."""
    reference, candidate = (
        need(state.reference, "reference"),
        need(state.candidate_measurement, "candidate measurement"),
    )
    p, commit = need(state.proposal, "proposal"), state.pending_commit
    if p.launch_argv is None:
        need(commit, "pending commit")
    enables = (
        f"predicted {p.predicted_speedup:.2f}x alone, {p.paired_speedup:.2f}x with {p.paired_with}"
        if p.paired_with and p.paired_with not in state.tried and p.predicted_speedup is not None
        else None
    )
    judged = rule_for(state.options.decision_rule).verdict(state, enables)
    reason, ok = judged.reason, judged.verdict == "accepted"
    if state.edited:
        reason += " (human-edited patch)"
    j = state.judgement  # None by the IQR rule
    bound = p.predicted_speedup if p.launch_argv is not None else None  # a launch option's is a bound
    if (
        j is not None
        and j.looks
        and (said := past_bound(j.last.speedup, (j.last.ci_low, j.last.ci_high), bound))
    ):
        reason += f"; {said}"
    decision = Decision(
        iteration=state.iteration,
        source=p.source,
        verdict=judged.verdict,
        reason=reason,
        tpot_ms_before=reference.tpot_ms.median,
        tpot_ms_after=candidate.tpot_ms.median,
        noise_ms=judged.noise_ms,
        outputs_identical=(
            candidate.outputs == reference.outputs
            if texts_compared(reference, state.options.schedule_gate)
            else None  # timing texts whose schedule follows the speed: the correctness set judged
        ),
        commit=commit.sha if ok and commit else None,
        edited=state.edited,
        judgement=j,
        prediction=predict(p, state.diagnosis) if ok and j is not None else None,
        tolerance=state.tolerance,
        output_gate=state.gate_note,
        numerics=state.numerics,
        launch_argv=p.launch_argv,
        predicted_speedup=p.predicted_speedup,
    )
    update: LoopUpdate = {
        "decisions": [decision],
        "transitions": transition("decide", f"{decision.verdict}: {reason}"),
    }
    chained = state.target.proposer.mode == "chain"
    if chained and state.server is not None and state.server.launch_argv:  # what ranking costs launches by
        update["startups"] = {**state.startups, " ".join(state.server.launch_argv): state.server.startup_s}
    if not ok:
        return Command(update=update, goto="rollback")
    edit = state.approval.diff if state.approval is not None else None  # not None: `state.edited`
    diff = p.diff if edit is None else edit
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
    kept = sum(1 for d in state.decisions if d.verdict == "accepted") + 1
    end: Literal["chain", "finish"] = "chain" if chained and kept >= 2 else "finish"
    if state.iteration + 1 > state.options.max_iterations:
        update["stop_reason"] = f"reached --max-iterations {state.options.max_iterations}"
        return Command(update=update, goto=end)
    near = near_floor(candidate.tpot_ms.median, state.options.floor_ms, state.options.floor_factor)
    if near is not None:
        update["stop_reason"] = near
        return Command(update=update, goto=end)
    return Command(update=update, goto="profile")
