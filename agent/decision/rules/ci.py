"""The decision rule `ci-v1` (every new session): the CI of the speedup, from per-request timings
(agent/decision/stats/rule.py) and the launch noise of A/A launches (agent/decision/stats/noise.py), over
sequential looks, after the output gate (agent/decision/gate/outputs.py).

The baseline is measured with the reference arm's full budget, kept as an A/A sample (with
sequential arms and no measured launch noise stored, the tree is launched once more for a second
one: agent/decision/arms/aalaunches.py), and takes the gate's reference outputs; a candidate is
measured look by look on its own launch (agent/decision/arms/measuring.py) or with the reference
launched beside it (agent/decision/arms/interleave.py, `[decide] arms = "interleaved"`).
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from agent.context import LoopContext, need
from agent.decision.arms import blocks
from agent.decision.arms.aalaunches import aa_launch
from agent.decision.arms.alternating import judge_alternating
from agent.decision.arms.arms import arms_in_use, arms_line, choose_arms, same_kind
from agent.decision.arms.crosshost import both_hosts_noise, judge_cross_host
from agent.decision.arms.interleave import judge_interleaved
from agent.decision.arms.measuring import (
    budget,
    judge_candidate,
    keep_aa,
    measure_arm,
    outputs_problem,
    unlike,
)
from agent.decision.calibration.autoaa import powered
from agent.decision.calibration.published import published
from agent.decision.gate import correctness, outputs
from agent.decision.judging import JudgedCandidate, MeasuredBaseline, RuleVerdict
from agent.decision.stats.crossover import plan_line as crossover_plan
from agent.decision.stats.replicates import plan_line
from state.sessions.loop import LoopState
from state.sessions.updates import LoopUpdate


class CiRule:
    """`ci-v1` (see the module's docstring)."""

    name = "ci-v1"
    checks_mechanisms = True

    def instruments_candidate(self, state: LoopState) -> bool:
        """Always: the reference ran with the dormant profiler, so every candidate does too."""
        return True

    def baseline(self, state: LoopState, runtime: Runtime[LoopContext]) -> MeasuredBaseline:
        """The reference arm's full budget now: its server is gone when a candidate runs; `auto`
        arms resolved first, on this server."""
        choice = choose_arms(state, runtime)
        state = state.model_copy(update={"arms": choice}) if choice is not None else state
        kind = same_kind(state, runtime) if state.target.decide.arms == "cross-host" else None
        measured = budget(state)
        m = measure_arm(state, runtime, "baseline", measured, warm_up=True)
        b = aa_launch(state, runtime, m, keep_aa(state, runtime, m), measured)  # (sequential: one more)
        relaunched = b.state.server != state.server
        state, m, noise = b.state, b.measurement, b.noise
        if arms_in_use(state) == "cross-host":
            noise = both_hosts_noise(state, runtime, noise)
        more: LoopUpdate = {"server": state.server, "launches": state.launches} if relaunched else {}
        evidence = noise.describe()
        relaunched_arms = arms_in_use(state) in ("alternating", "cross-host")
        if state.options.power and not relaunched_arms:  # (alternating, cross-host: their plan lines)
            p = powered(state, runtime, m, noise)
            state, m, noise, evidence = p.state, p.measurement, p.noise, f"{p.note}{p.power.line()}"
            more.update({"power": p.power, "target": state.target, "launches": state.launches})
            measured = max(measured, budget(state) if arms_in_use(state) == "sequential" else 0)
        if relaunched_arms and state.options.paired_blocks and arms_in_use(state) == "alternating":
            evidence = "the launch noise in the plan below"  # (pooled: the default is no floor there)
        evidence = b.note + evidence
        update = outputs.reference_outputs(state, runtime, m)
        note = (
            f"; {len(m.outputs)} prompts x {measured} requests, {m.warmups_discarded} warm-up(s) "
            f"discarded; {evidence}; {correctness.describe(state, update)}"
        )
        if choice is not None:
            more["arms"] = choice
            note += f"; {arms_line(choice)}"
        if arms_in_use(state) == "alternating" and state.options.paired_blocks:
            at = state.model_copy(update={"launch_noise": noise})
            note += f"; {blocks.plan(at, runtime, m)}"
        elif arms_in_use(state) == "alternating":
            note += f"; {plan_line(noise, state.target.decide)}"
        if state.options.paired_blocks:  # what calibration publishes, so far on this host
            note += f"; {published(b.samples, noise, state.target.decide, arms_in_use(state)).line()}"
        elif arms_in_use(state) == "cross-host":
            note += f"; {crossover_plan(noise, state.target.decide)}" + (f"; {kind}" if kind else "")
        return MeasuredBaseline(
            m, {**more, **update, "launch_noise": noise}, note
        )  # (update's launches: later)

    def judge(self, state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
        arms = arms_in_use(state)
        if arms == "interleaved":
            return judge_interleaved(state, runtime, label)
        if arms == "alternating":
            return judge_alternating(state, runtime, label)
        if arms == "cross-host":
            return judge_cross_host(state, runtime, label)
        return judge_candidate(state, runtime, label)

    def verdict(self, state: LoopState, enables: str | None) -> RuleVerdict:
        """The judgement's verdict, with both arms' numbers; a candidate the gate (or unlike arms)
        stopped before any timing verdict is rejected."""
        ref, cand, j = (
            need(state.reference, "reference"),
            need(state.candidate_measurement, "candidate measurement"),
            state.judgement,
        )
        if j is None:
            problem = (
                state.gate_problem
                or outputs_problem(ref, cand, schedule_gate=state.options.schedule_gate)
                or unlike(ref, cand)
                or "not judged"
            )
            return RuleVerdict("rejected", problem)
        a, b = need(j.reference, "reference arm"), need(j.candidate, "candidate arm")
        reason = (
            f"{j.line()}; median TPOT {a.tpot_ms_median:.1f} -> {b.tpot_ms_median:.1f} ms, "
            f"ITL p50/p99 {a.itl_ms_p50:.1f}/{a.itl_ms_p99:.1f} -> {b.itl_ms_p50:.1f}/{b.itl_ms_p99:.1f} ms, "
            f"TTFT {a.ttft_ms_median:.1f} -> {b.ttft_ms_median:.1f} ms, warm-ups discarded "
            f"{a.warmups_discarded}+{b.warmups_discarded}"
        )
        if a.outliers or b.outliers:
            reason += f", outliers flagged {a.outliers}+{b.outliers}"
        if state.tolerance is not None:
            reason += f", {state.tolerance.line()}"
        else:
            reason += f", {state.gate_note}" if state.gate_note else ", outputs identical"
        if enables is not None and j.verdict in ("rejected", "inconclusive"):
            return RuleVerdict("accepted", f"{reason}; no gain alone, kept as an enabling step ({enables})")
        return RuleVerdict(j.verdict, reason)
