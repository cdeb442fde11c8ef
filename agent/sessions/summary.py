"""A session's outcome in one record (pure): what `perfloop show`, `--json` and the report print."""

from __future__ import annotations

from collections.abc import Sequence

from agent.decision.arms.arms import arms_line
from agent.decision.arms.measuring import beside_note, serving_note, texts_compared
from agent.decision.gate import numerics
from agent.decision.gate.correctness import refusal
from agent.decision.stats.levels import at_level
from agent.decision.stats.rule import percentile, pooled_metric, serving_stats
from agent.proposer.chain import chain_of
from agent.proposer.tuning.search import trial_lines
from agent.sessions.floor import floors_of
from state.door.records import ToolCallRecord
from state.measurement.measure import Measurement
from state.measurement.workload import OBJECTIVES
from state.sessions.loop import LoopState
from state.sessions.session import Summary


def summarize(state: LoopState, status: str, calls: Sequence[ToolCallRecord] = ()) -> Summary:
    """The session's outcome (pure); `calls`: every tool call the store recorded for it, those of
    attempts cut short included, for the launches they made (`launches_made`)."""
    before, after = state.baseline, state.reference
    rejected = [d.label for d in state.decisions if d.verdict != "accepted"]
    kept = [d.label for d in state.decisions if d.verdict == "accepted"]
    judged = [d for d in state.decisions if d.judgement is not None]
    decisive = next((d for d in reversed(judged) if d.verdict == "accepted"), judged[-1] if judged else None)
    j = decisive.judgement if decisive else None
    scored = [d for d in state.decisions if d.tolerance is not None]
    gated = next((d for d in reversed(scored) if d.verdict == "accepted"), scored[-1] if scored else None)
    gate = None  # the default exact policy, as in sessions recorded before the tolerance policy
    if state.target.correctness.policy == "tolerance":
        gate = "tolerance" + (f": {gated.tolerance.line()}" if gated and gated.tolerance else "")
    elif state.numerics_noise is not None:  # the numerics policy: each change's class, with its figures
        gate = numerics.summary_line(state)
    elif state.output_noise is not None:  # schedule-aware: the plan, why the last candidate passed or failed
        said = [d for d in state.decisions if d.output_gate]
        last = next((d for d in reversed(said) if d.verdict == "accepted"), said[-1] if said else None)
        gate = f"exact alone; {state.output_noise.line()}"
        gate += f"; {last.label}: {last.output_gate}" if last is not None else ""
    reach = None
    if state.options.long_prompts and state.target.correctness.long_prompts == 0:
        reach = "no long prompts (long_prompts = 0): checked only up to max_prompt_chars"
    if (lp := state.long_prompts) is not None:
        reach = lp.line(state.target.correctness.max_tokens)
        reach += f"; {why}" if (why := refusal(state)) is not None else ""
    a, b = timed_tpot(before), timed_tpot(after)  # a merged stream timed nothing: not measured, never 0.0
    timing = {"tpot_ms_before": a, "tpot_ms_after": b, "speedup": a / b if a and b else None}
    timing |= serving_figures(state, before, after)
    return Summary(
        session=state.session_id,
        status=status,
        **timing,
        ttft_ms_before=before.ttft_ms.median if before else None,
        ttft_ms_after=after.ttft_ms.median if after else None,
        outputs_identical=(
            after.outputs == before.outputs
            if before and after and kept and texts_compared(before, state.options.schedule_gate)
            else None
        ),
        accepted=kept,
        rejected=rejected,
        commits=[c.sha for c in state.accepted],
        branch=state.branch,
        checkout=state.checkout,
        server_launches=max(state.launches, launches_made(calls)),
        profile_method=state.target.profile.method,
        measured_by=before.client if before else None,
        workload=state.target.workload.describe() if state.target.workload else None,
        serving_before=serving_note(before).removeprefix("; ") or None if before else None,
        serving_after=serving_note(after).removeprefix("; ") or None if after else None,
        beside_before=beside_note(before).removeprefix("; beside, ") or None if before else None,
        beside_after=beside_note(after).removeprefix("; beside, ") or None if after else None,
        iterations=len(state.profiles),
        stop_reason=state.stop_reason or state.error or "",
        llm_tokens=state.llm_usage.tokens,
        llm_calls=state.llm_usage.calls,
        repo=state.target.repo,
        verdict=j.verdict if j else None,
        speedup_ci=[j.last.ci_low, j.last.ci_high] if j else None,
        speedup_judged=j.last.speedup if j else None,
        requests_per_arm=j.last.requests_candidate if j else None,
        launch_noise=j.launch_noise.sigma_log if j else None,
        decision=j.line() if j else None,
        power=state.power.line() if state.power else None,
        output_gate=gate,
        arms=arms_line(state.arms) if state.arms else None,
        correctness_set=reach,
        mechanisms=[f"{m.playbook}: {m.note}" for m in state.mechanisms],
        unexplained_gains=[m.playbook for m in state.mechanisms if not m.confirmed],
        launch_argv=state.kept_argv,
        trials=[t.line() for t in state.trials],
        search_trials=trial_lines(state),
        chain=chain_of(state),
        floors=floors_of(state, timing["tpot_ms_before"], timing["tpot_ms_after"]),
    )


def launches_made(calls: Sequence[ToolCallRecord]) -> int:
    """The server launches among a session's recorded calls, across its attempts (pure): a resumed
    session's state counts only those of the attempts that finished, yet an attempt a signal cut
    short had started its servers too (a launch SIGKILLed before the door recorded it is not
    counted; a call re-used from a cut attempt is not a launch)."""
    return sum(1 for c in calls if c.name == "server.launch" and c.reused_from is None)


def timed_tpot(m: Measurement | None) -> float | None:
    """The measurement's TPOT median over the requests whose stream timed their tokens; None when
    none did (the server merged every stream: no decode time can be read from it) (pure)."""
    if m is None or not any(r.timed for r in m.requests):
        return None
    return m.tpot_ms.median


def serving_figures(state: LoopState, before: Measurement | None, after: Measurement | None) -> dict:
    """Under `[workload]`, at its primary concurrency level: the objective before and after (over
    all of each arm's windows at that level), the speedup as its ratio (after / before for a
    throughput, before / after for a latency) in place of the per-request TPOT's, and TPOT p50 and
    p99; {} without a workload (pure)."""
    w = state.target.workload
    if w is None:
        return {}
    name, unit, _ = OBJECTIVES[w.objective]
    out: dict = {"objective": f"{name} ({unit})"}
    for k, m in (("before", before), ("after", after)):
        at = at_level(m, w.primary) if m and m.windows else None
        tpot = [r.tpot_ms for r in at.requests if r.timed] if at else []  # the timed requests only
        out[f"objective_{k}"] = pooled_metric(at, w) if at else None
        out[f"tpot_ms_{k}"] = percentile(tpot, 0.5) if tpot else None
        out[f"tpot_ms_p99_{k}"] = serving_stats(at.requests, at.windows)["tpot_ms_p99"] if at else None
    a, b = out["objective_before"], out["objective_after"]
    out["speedup"] = w.gain(a, b) if a is not None and b is not None else None
    return out


def first_launch_failure(state: LoopState) -> str | None:
    """Why the session's first launch failed, when that is how it ended and its clean-up left
    nothing behind (no server, the repo as found: `abort` met no problem); else None (pure).

    Such a session measured nothing: the failure is the environment's or the launch command's
    (a port in use, a server that exits at once), reported like bad input rather than as a session.
    """
    if state.status != "failed" or state.baseline is not None or state.launches or state.accepted:
        return None
    if len(state.transitions) < 2:
        return None
    failed, ended = state.transitions[-2:]
    if failed.node != "launch" or not failed.note.startswith("error: ") or ended.node != "abort":
        return None
    message = failed.note.removeprefix("error: ")
    return message if state.error == f"launch: {message}" and state.branch is None else None
