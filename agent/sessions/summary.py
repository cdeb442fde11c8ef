"""A session's outcome in one record (pure): what `perfloop show`, `--json` and the report print."""

from __future__ import annotations

from agent.decision.arms import arms_line
from agent.decision.correctness import refusal
from agent.decision.measuring import serving_note
from agent.proposer.search import trial_lines
from state.loop import LoopState
from state.session import Summary


def summarize(state: LoopState, status: str) -> Summary:
    """The session's outcome (pure)."""
    before, after = state.baseline, state.reference
    rejected = [d.label for d in state.decisions if d.verdict != "accepted"]
    judged = [d for d in state.decisions if d.judgement is not None]
    decisive = next((d for d in reversed(judged) if d.verdict == "accepted"), judged[-1] if judged else None)
    j = decisive.judgement if decisive else None
    scored = [d for d in state.decisions if d.tolerance is not None]
    gated = next((d for d in reversed(scored) if d.verdict == "accepted"), scored[-1] if scored else None)
    gate = None  # the default exact policy, as in sessions recorded before the tolerance policy
    if state.target.correctness.policy == "tolerance":
        gate = "tolerance" + (f": {gated.tolerance.line()}" if gated and gated.tolerance else "")
    reach = None
    if state.options.long_prompts and state.target.correctness.long_prompts == 0:
        reach = "no long prompts (long_prompts = 0): checked only up to max_prompt_chars"
    if (lp := state.long_prompts) is not None:
        reach = lp.line(state.target.correctness.max_tokens)
        reach += f"; {why}" if (why := refusal(state)) is not None else ""
    return Summary(
        session=state.session_id,
        status=status,
        tpot_ms_before=before.tpot_ms.median if before else None,
        tpot_ms_after=after.tpot_ms.median if after else None,
        speedup=before.tpot_ms.median / after.tpot_ms.median if before and after else None,
        ttft_ms_before=before.ttft_ms.median if before else None,
        ttft_ms_after=after.ttft_ms.median if after else None,
        outputs_identical=after.outputs == before.outputs if before and after else None,
        accepted=[d.label for d in state.decisions if d.verdict == "accepted"],
        rejected=rejected,
        commits=[c.sha for c in state.accepted],
        branch=state.branch,
        server_launches=state.launches,
        profile_method=state.target.profile.method,
        measured_by=before.client if before else None,
        workload=state.target.workload.describe() if state.target.workload else None,
        serving_before=serving_note(before).removeprefix("; ") or None if before else None,
        serving_after=serving_note(after).removeprefix("; ") or None if after else None,
        iterations=len(state.profiles),
        stop_reason=state.stop_reason or state.error or "",
        llm_tokens=state.llm_usage.tokens,
        llm_calls=state.llm_usage.calls,
        repo=state.target.repo,
        verdict=j.verdict if j else None,
        speedup_ci=[j.last.ci_low, j.last.ci_high] if j else None,
        requests_per_arm=j.last.requests_candidate if j else None,
        launch_noise=j.launch_noise.sigma_log if j else None,
        decision=j.line() if j else None,
        output_gate=gate,
        arms=arms_line(state.arms) if state.arms else None,
        correctness_set=reach,
        mechanisms=[f"{m.playbook}: {m.note}" for m in state.mechanisms],
        unexplained_gains=[m.playbook for m in state.mechanisms if not m.confirmed],
        launch_argv=state.kept_argv,
        trials=[t.line() for t in state.trials],
        search_trials=trial_lines(state),
    )
