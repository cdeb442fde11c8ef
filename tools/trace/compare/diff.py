"""Compare two profiles operator group by operator group, per step (pure)."""

from state.profiling.profile import OpDelta, ProfileDiff, ProfileSummary

SAME_FRACTION = 0.05
SAME_US = 1.0


def diff_profiles(before: ProfileSummary, after: ProfileSummary) -> ProfileDiff:
    """Which groups grew, shrank, appeared or vanished, in self time per step; biggest change first.

    A group counts as the same when its change is within max(5% of its larger side, 1 us) per step;
    groups under 1 us per step on both sides are left out."""
    old = {(op.name, repr(op.input_dims)): op for op in before.ops}
    new = {(op.name, repr(op.input_dims)): op for op in after.ops}
    rows = []
    for key in old.keys() | new.keys():
        a, b = old.get(key), new.get(key)
        us_a = a.self_us / before.steps if a else 0.0
        us_b = b.self_us / after.steps if b else 0.0
        status = _status(a is not None, b is not None, us_a, us_b)
        if status != "same":
            rows.append(
                OpDelta(
                    name=key[0],
                    input_dims=(a or new[key]).input_dims,
                    before_us_per_step=us_a,
                    after_us_per_step=us_b,
                    delta_us_per_step=us_b - us_a,
                    status=status,
                )
            )
    rows.sort(key=lambda r: abs(r.delta_us_per_step), reverse=True)
    note = (
        ""
        if before.time_basis == after.time_basis
        else (
            f"time bases differ ({before.time_basis} vs {after.time_basis}): compare traces of the same kind"
        )
    )
    return ProfileDiff(
        before=before.source,
        after=after.source,
        time_basis=after.time_basis,
        before_step_us=before.step_us,
        after_step_us=after.step_us,
        ops=rows,
        note=note,
    )


def _status(in_before: bool, in_after: bool, us_a: float, us_b: float) -> str:
    """grew / shrank / appeared / vanished / same for one group."""
    if max(us_a, us_b) <= SAME_US:
        return "same"
    if not in_before:
        return "appeared"
    if not in_after:
        return "vanished"
    if abs(us_b - us_a) <= max(SAME_FRACTION * max(us_a, us_b), SAME_US):
        return "same"
    return "grew" if us_b > us_a else "shrank"
