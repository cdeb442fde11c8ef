"""The legacy decision rule `iqr-v0`: faster by more than the noise, and identical outputs.

Sessions recorded before the CI rule carry no `decision_rule` and replay with this one, as they
were decided: one measurement of each arm (`measure_server`), the median TPOT must beat the
reference's by more than the larger interquartile range, every prompt's greedy output must
match. The only module that names the rule; the steps reach it through `agent/decision/rules/__init__.py`.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from agent.context import LoopContext, need
from agent.decision.judging import JudgedCandidate, MeasuredBaseline, RuleVerdict
from agent.serving import measure_server
from state.measurement.measure import Measurement
from state.sessions.loop import LoopState


class IqrRule:
    """`iqr-v0` (see the module's docstring)."""

    name = "iqr-v0"
    checks_mechanisms = False

    def instruments_candidate(self, state: LoopState) -> bool:
        """Only when another iteration may follow (as these sessions were recorded)."""
        return state.iteration < state.options.max_iterations

    def baseline(self, state: LoopState, runtime: Runtime[LoopContext]) -> MeasuredBaseline:
        return MeasuredBaseline(measure_server(state, runtime, "baseline"))

    def judge(self, state: LoopState, runtime: Runtime[LoopContext], label: str) -> JudgedCandidate:
        return JudgedCandidate(measure_server(state, runtime, label))

    def verdict(self, state: LoopState, enables: str | None) -> RuleVerdict:
        reference = need(state.reference, "reference")
        candidate = need(state.candidate_measurement, "candidate measurement")
        ok, reason, noise = judge(reference, candidate, enables)
        return RuleVerdict("accepted" if ok else "rejected", reason, noise)


def judge(
    reference: Measurement, candidate: Measurement, enables: str | None = None
) -> tuple[bool, str, float]:
    """Return (accept, one-line reason, noise_ms).

    Noise is the larger interquartile range of the two per-request TPOT samples; the candidate's
    median must beat the reference's by more than that, and every prompt's greedy output must match.
    `enables` (a line naming the paired fix and the speedup predicted for both) marks a fix that
    the gain model predicts gains little alone and much together with another: it is kept when its
    outputs are identical and TPOT got no worse beyond the noise, so the other fix can follow.
    """
    noise = max(reference.tpot_ms.iqr, candidate.tpot_ms.iqr)
    before, after = reference.tpot_ms.median, candidate.tpot_ms.median
    gain = before - after
    if candidate.outputs != reference.outputs:
        changed = sum(a != b for a, b in zip(reference.outputs, candidate.outputs, strict=False))
        return False, f"outputs changed for {changed}/{len(reference.outputs)} prompt(s)", noise
    if not candidate.outputs_stable:
        return False, "outputs differ between repeats of the same prompt", noise
    if gain < 0 and -gain > noise:
        return False, f"TPOT got worse: {before:.1f} -> {after:.1f} ms (noise {noise:.1f} ms)", noise
    if gain <= noise and enables is not None:
        return (
            True,
            (
                f"TPOT {before:.1f} -> {after:.1f} ms: within the noise {noise:.1f} ms, kept as an "
                f"enabling step ({enables}), outputs identical"
            ),
            noise,
        )
    if gain <= noise:
        return (
            False,
            (
                f"TPOT {before:.1f} -> {after:.1f} ms: change {gain:+.1f} ms is within the "
                f"measured noise {noise:.1f} ms"
            ),
            noise,
        )
    return True, f"TPOT {before:.1f} -> {after:.1f} ms ({before / after:.2f}x), outputs identical", noise
