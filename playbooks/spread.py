"""How sure a prediction is: the profiler's inflation of the host's time, and the range of a
prediction over a trace's step windows.

A torch.profiler trace is not the served step. Recording every operator and launch slows the host,
while the kernels run about as they do served: the glm5 demo's eager step on one H200 took 150 to
257 ms profiled against 80 to 117 ms served (benchmarks/README.md, "The gain model held out"). A
launch fix predicted from the profiled step is therefore compared with a step that never runs:
that is what made one trace of the eager glm5 demo predict CUDA graphs at 2.7x where they realize
1.05-1.4x. With the served TPOT, `predict.calibrated` scales the host's terms to it; without one,
they are divided by HOST_INFLATION, what a corpus of H200 traces with known TPOTs shows
(`fit_inflation`; benchmarks/gain_heldout.py refits it leaving each launch out).

A prediction is a range: each step window predicted on its own and, without a TPOT, at the least
and the most inflation the corpus showed. Every number stays within physics (`predict.floor_us`):
a fix that removes host launch gaps cannot beat the step over its device-busy time, and the device
time a graph replay keeps (the cast's kernels) is the least its step can take.
Pure functions.
"""

from dataclasses import dataclass
from statistics import median

from playbooks.predict import calibrated, predict_step_us
from state.profiling.diagnosis import StepEffect
from state.profiling.profile import StepBounds


@dataclass(frozen=True)
class Inflation:
    """Profiled host time over served host time of a step: typical, least and most seen."""

    point: float
    low: float
    high: float


HOST_INFLATION = Inflation(point=1.92, low=1.58, high=2.47)
"""For a host-launch-bound trace (eager decode): fitted by `fit_inflation` on such H200 traces of
benchmarks/gain_heldout.py's corpus (the glm5 demo, eager, API and patch methods, sessions of
2026-11-30 to 2026-12-02); tests/unit/test_gain_heldout.py checks these numbers against that fit."""
DEVICE_INFLATION = Inflation(point=11.17, low=3.16, high=50.0)
"""For a device-bound trace (a graph-replayed step): the same fit on those traces. The host time
such a trace shows is mostly the profiler's own (buffer flushes, the copy it waits on); served, the
step is about the device's time (82.9 ms served against 82.3 ms of kernels), so the host's terms
mostly vanish (50 is `predict.calibrated`'s floor: all of them the profiler's)."""


def fitted_for(b: StepBounds) -> Inflation:
    """The inflation fitted on traces bound like this one."""
    return HOST_INFLATION if b.bound == "host launch" else DEVICE_INFLATION


def inflation_of(b: StepBounds, tpot_us: float) -> float | None:
    """Profiled over served host time of one trace whose TPOT is known (the factor
    `predict.calibrated` scales its host terms by, inverted); None where it cannot be scaled."""
    served = calibrated(b, tpot_us)
    if served is b or served.issue_us <= 0 or b.issue_us <= 0:
        return None
    return b.issue_us / served.issue_us


def fit_inflation(pairs: list[tuple[StepBounds, float]], bound: str = "host launch") -> Inflation:
    """The median, least and most inflation over the (bounds, served TPOT in us) pairs of traces
    bound by `bound`."""
    found = [k for b, tpot in pairs if b.bound == bound and (k := inflation_of(b, tpot)) is not None]
    if not found:
        raise ValueError(f"no {bound}-bound trace with a TPOT to fit the inflation on")
    return Inflation(point=round(median(found), 2), low=round(min(found), 2), high=round(max(found), 2))


def deprofiled(b: StepBounds, inflation: float) -> StepBounds:
    """The bounds with the host's terms divided by the profiler's inflation (the device's kept)."""
    if inflation == 1.0:
        return b
    serial, issue = b.serial_host_us / inflation, b.issue_us / inflation
    residual = b.residual_us / inflation
    return b.model_copy(
        update={
            "wall_us": serial + max(issue, b.device_us) + residual,
            "host_us": b.host_us / inflation,
            "issue_us": issue,
            "serial_host_us": serial,
            "residual_us": residual,
            "bound": "host launch" if issue > b.device_us else "device",
        }
    )


def served_bounds(b: StepBounds, tpot_us: float | None, inflation: float | None) -> StepBounds:
    """The bounds a prediction starts from: scaled to the TPOT when known, else de-profiled."""
    if tpot_us is not None and tpot_us > 0:
        return calibrated(b, tpot_us)
    return deprofiled(b, fitted_for(b).point if inflation is None else inflation)


def windows(b: StepBounds) -> list[StepBounds]:
    """Each step window as bounds of its own (the medians alone where windows were not kept)."""
    if not b.per_window:
        return [b]
    return [
        b.model_copy(
            update={
                **w.model_dump(),
                "host_us": w.serial_host_us + w.issue_us,
                "bound": "host launch" if w.issue_us > w.device_us else "device",
                "per_window": [],
            }
        )
        for w in b.per_window
    ]


def speedup_range(
    b: StepBounds,
    effects: list[StepEffect],
    tpot_us: float | None,
    inflation: float | None,
    fitted: Inflation | None = None,
) -> tuple[float, float]:
    """(least, most) speedup of the effects over the step windows: each window scaled to the TPOT
    when known, else de-profiled at the least and the most inflation fitted (or the one given)."""
    if tpot_us is not None and tpot_us > 0:
        starts = [calibrated(w, tpot_us) for w in windows(b)]
    else:
        fit = fitted or fitted_for(b)
        ks = (fit.low, fit.high) if inflation is None else (inflation,)
        starts = [deprofiled(w, k) for w in windows(b) for k in ks]
    speedups = [predict_step_us(s, []) / predict_step_us(s, effects) for s in starts]
    return min(speedups), max(speedups)
