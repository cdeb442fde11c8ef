"""The gain model held out: each trace's fixes predicted with the profiler's inflation fitted on the
other launches only, against what the fixes realized (benchmarks/gain_heldout.py builds the corpus
and prints the table; tests/unit/test_gain_heldout.py checks it).

A corpus row is one trace of the glm5 demo on one H200: the step bounds this checkout reads from it
(each window's too), the effect of each fix the playbooks found in it, the TPOT its server served
before it was profiled, and what each fix realized on that configuration (eager TPOT over graphs
TPOT for CUDA graphs alone; full-pool-cast TPOT over gather-then-cast TPOT for the cast fix alone).
Pure functions.
"""

from statistics import median

from pydantic import Field

from playbooks.predict import calibrated, predict_step_us
from playbooks.spread import Inflation, deprofiled, fit_inflation, speedup_range
from state.base import Model
from state.profiling.diagnosis import StepEffect
from state.profiling.profile import StepBounds

WITHIN = 0.25
"""A prediction holds when it is within this fraction of what the fix realized."""


class CorpusTrace(Model):
    """One trace of the corpus."""

    id: str
    """`<origin>/<variant>-<mode>-<method>`."""
    launch: str
    """The server launch the trace was taken on: traces of one launch are left out together."""
    origin: str
    """The device call (`h200-2026-12-02-call1`) or the recorded session it came from."""
    variant: str
    """`cast` (the full-pool cast in place) or `fixed` (gather-then-cast)."""
    mode: str
    """`eager` (--disable-cuda-graph) or `graphs`."""
    method: str
    """How it was profiled: `api` (/start_profile) or `patch` (perfloop's hook)."""
    tpot_ms: float = Field(gt=0)
    """Median TPOT the launch served before it was profiled, in ms."""
    bounds: StepBounds
    """The step bounds this checkout read from the trace (per window where the trace is stored)."""
    effects: dict[str, StepEffect]
    """Each fix the playbooks found in the trace, by playbook id: its effect on the step."""
    realized: dict[str, float]
    """What each fix alone realized on this configuration, by playbook id (TPOT ratio)."""
    trace_file: str | None = None
    """The committed trace (tests/data/traces/gain/), or None where only its bounds are kept."""


class HeldOutRow(Model):
    """One fix of one trace, predicted with the inflation fitted on the other launches."""

    id: str
    """The trace's id."""
    playbook: str
    """The fix."""
    inflation: Inflation
    """The profiler's host inflation fitted without this trace's launch."""
    predicted_speedup: float
    """Predicted from the trace alone (no TPOT): host terms divided by the fitted median."""
    predicted_speedup_low: float
    """Least over the trace's windows and the fitted inflations."""
    predicted_speedup_high: float
    """Most over the same."""
    with_tpot_speedup: float
    """Predicted with the launch's TPOT given (host terms scaled to it)."""
    raw_speedup: float
    """Predicted from the profiled step as it is (no TPOT, no de-profiling): what the model gave
    before this check."""
    realized_speedup: float
    """What the fix realized."""

    @property
    def error(self) -> float:
        """Predicted over realized, less one."""
        return self.predicted_speedup / self.realized_speedup - 1

    @property
    def within(self) -> bool:
        """Within WITHIN of the realized figure."""
        return abs(self.error) <= WITHIN

    @property
    def covered(self) -> bool:
        """The realized figure lies in the predicted range."""
        return self.predicted_speedup_low <= self.realized_speedup <= self.predicted_speedup_high


def _speedup(b: StepBounds, effect: StepEffect) -> float:
    return predict_step_us(b, []) / predict_step_us(b, [effect])


def leave_one_out(corpus: list[CorpusTrace]) -> list[HeldOutRow]:
    """Every realized fix of every trace, predicted with the inflation fitted on the other launches."""
    rows = []
    for t in corpus:
        others = [(o.bounds, o.tpot_ms * 1000) for o in corpus if o.launch != t.launch]
        fitted = fit_inflation(others, t.bounds.bound)
        for playbook, realized in sorted(t.realized.items()):
            effect = t.effects.get(playbook)
            if effect is None:
                continue
            low, high = speedup_range(t.bounds, [effect], None, None, fitted)
            point = _speedup(deprofiled(t.bounds, fitted.point), effect)
            rows.append(
                HeldOutRow(
                    id=t.id,
                    playbook=playbook,
                    inflation=fitted,
                    predicted_speedup=point,
                    predicted_speedup_low=min(low, point),
                    predicted_speedup_high=max(high, point),
                    with_tpot_speedup=_speedup(calibrated(t.bounds, t.tpot_ms * 1000), effect),
                    raw_speedup=_speedup(t.bounds, effect),
                    realized_speedup=realized,
                )
            )
    return rows


def table(rows: list[HeldOutRow]) -> str:
    """The rows as a markdown table, then how many hold."""
    lines = [
        "| trace | fix | inflation fitted without it | predicted (range) | error | with the TPOT | raw | realized |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        k = r.inflation
        lines.append(
            f"| {r.id} | {r.playbook} | {k.point:.2f} ({k.low:.2f}-{k.high:.2f}) | "
            f"{r.predicted_speedup:.2f}x ({r.predicted_speedup_low:.2f}-{r.predicted_speedup_high:.2f}) | "
            f"{r.error:+.0%}{'' if r.within else ' !'}{'' if r.covered else ' (outside the range)'} | "
            f"{r.with_tpot_speedup:.2f}x | {r.raw_speedup:.2f}x | {r.realized_speedup:.2f}x |"
        )
    held = sum(r.within for r in rows)
    covered = sum(r.covered for r in rows)
    errors = [abs(r.error) for r in rows]
    lines.append("")
    lines.append(
        f"{held} of {len(rows)} within {WITHIN:.0%}, {covered} of {len(rows)} inside their range; "
        f"median error {median(errors):.0%}"
        if rows
        else "no rows"
    )
    return "\n".join(lines)
