"""The mechanism check, as pure functions: did the operator a diagnosis blamed actually shrink?

A playbook predicts what its patch changes (its evidence operator, and a share of decode time
removed). After the patch is accepted, the next profile says what happened. Sessions with
`LoopOptions.mechanism_range` call it confirmed only when the realized reduction lies within
`IN_RANGE` (0.5x to 2x) of the predicted one, and otherwise say how far off it was (short of it,
or several times larger: the prediction is wrong, or the gain has another cause); sessions
recorded before it called a reduction of at least half the predicted one confirmed, however large.
"""

from __future__ import annotations

from state.measurement.decision import MechanismCheck, Prediction
from state.profiling.diagnosis import Diagnosis
from state.profiling.profile import ProfileSummary
from state.sessions.loop import Proposal

CONFIRMED_FRACTION = 0.5
"""Share of the predicted reduction the operator must show for the mechanism to count as seen."""


def predict(proposal: Proposal, diagnosis: Diagnosis | None) -> Prediction | None:
    """The proposal's prediction, if its evidence and the profile's step count are known."""
    if not proposal.evidence or diagnosis is None or not diagnosis.steps:
        return None
    ev = proposal.evidence[0]
    return Prediction(
        op=ev.op,
        dims=ev.dims,
        op_us_per_step=ev.self_us / diagnosis.steps,
        step_us=diagnosis.step_us,
        expected_gain_share=proposal.expected_gain_share,
    )


IN_RANGE = (0.5, 2.0)
"""By magnitude (`LoopOptions.mechanism_range`): the realized reduction must lie within these
multiples of the predicted one for the mechanism to count as confirmed."""


def by_magnitude(removed_us: float, predicted_us: float) -> tuple[bool, str, float | None]:
    """(confirmed, the verdict's words, realized over predicted) when the realized reduction must lie
    in the prediction's range `IN_RANGE` (pure)."""
    if predicted_us <= 0:
        return False, "no reduction was predicted: not checked", None
    ratio = removed_us / predicted_us
    low, high = IN_RANGE
    if ratio < 0.05:
        return False, "GAIN WITHOUT MECHANISM: the predicted op did not shrink", ratio
    if ratio < low:
        return False, f"mechanism short of the prediction: {ratio:.0%} of the predicted reduction", ratio
    if ratio > high:
        return (
            False,
            (
                f"mechanism off by {ratio:.1f}x: the op shrank {ratio:.1f}x more than predicted "
                "(the prediction is wrong, or the gain has another cause)"
            ),
            ratio,
        )
    return True, f"mechanism confirmed ({ratio:.0%} of the predicted reduction)", ratio


def check(
    iteration: int, playbook: str, p: Prediction, after: ProfileSummary, *, ms: bool, by_range: bool = False
) -> MechanismCheck:
    """Compare a prediction with the first profile after the patch; `ms`: its line in ms per step
    (`LoopOptions.mechanism_ms`), else in us as sessions recorded before it wrote it; `by_range`
    (`LoopOptions.mechanism_range`): confirmed only within `IN_RANGE` of the prediction, else
    (as recorded before it) whenever at least half of it was removed."""
    same = [o for o in after.ops if o.name == p.op and o.input_dims == p.dims]
    op_after = sum(o.self_us for o in same) / max(after.steps, 1)
    if p.step_us is not None and p.expected_gain_share > 0:
        predicted = min(p.step_us * p.expected_gain_share, p.op_us_per_step)
    else:
        predicted = p.op_us_per_step
    removed = p.op_us_per_step - op_after
    ratio: float | None = None
    if by_range:
        confirmed, verdict, ratio = by_magnitude(removed, predicted)
    else:
        confirmed = removed >= CONFIRMED_FRACTION * predicted
        verdict = (
            "mechanism confirmed" if confirmed else "GAIN WITHOUT MECHANISM: the predicted op did not shrink"
        )
    return MechanismCheck(
        iteration=iteration,
        playbook=playbook,
        op=p.op,
        op_us_per_step_before=p.op_us_per_step,
        op_us_per_step_after=op_after,
        predicted_removed_us=predicted,
        step_us_before=p.step_us,
        step_us_after=after.step_us,
        confirmed=confirmed,
        realized_over_predicted=ratio,
        note=note(p, op_after, predicted, after.step_us, ms) + f": {verdict}",
    )


def note(p: Prediction, op_after_us: float, predicted_us: float, step_after_us: float, ms: bool) -> str:
    """The check's figures in one line, e.g. `aten::copy_ 0.412 -> 0.000 ms/step (predicted -0.380);
    step 0.500 -> 0.090 ms`, or in us (`412.0 -> 0.0 us/step (predicted -380.1); step 500 -> 90 us`)
    as sessions recorded before `LoopOptions.mechanism_ms` wrote it (pure)."""
    if ms:
        line = f"{p.op} {p.op_us_per_step / 1e3:.3f} -> {op_after_us / 1e3:.3f} ms/step"
        line += f" (predicted -{predicted_us / 1e3:.3f})"
        step = (
            f"; step {p.step_us / 1e3:.3f} -> {step_after_us / 1e3:.3f} ms" if p.step_us is not None else ""
        )
        return line + step
    line = f"{p.op} {p.op_us_per_step:.1f} -> {op_after_us:.1f} us/step (predicted -{predicted_us:.1f})"
    return line + (f"; step {p.step_us:.0f} -> {step_after_us:.0f} us" if p.step_us is not None else "")


def past_bound(speedup: float, ci: tuple[float, float], bound: float | None) -> str | None:
    """Words for a launch option's judged `speedup` (its interval `ci`) above its predicted upper
    `bound` (e.g. 4 sequences a step where there was 1: at most 4.00x); None when within it (pure).
    Within the interval the excess is the measurement's spread; an interval wholly above the bound
    says the bound missed part of what the change did."""
    if bound is None or speedup <= bound:
        return None
    said = f"{speedup:.2f}x is above its predicted bound of at most {bound:.2f}x"
    if ci[0] <= bound:
        return f"{said}, which its interval [{ci[0]:.2f}, {ci[1]:.2f}] holds: the excess is the measurement's spread"
    return (
        f"{said}, and its whole interval [{ci[0]:.2f}, {ci[1]:.2f}] too: the bound missed part of what the "
        "change did (e.g. the old setting also cost queueing or memory time the profile did not show)"
    )
