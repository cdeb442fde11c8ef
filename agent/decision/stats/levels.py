"""Several concurrency levels in one `[workload]` (`concurrency = [8, 1]`), as pure functions.

Every measurement holds windows at each level (`Window.concurrency`). The rule judges the first
level listed, the primary, exactly as a single level (looks, CI, A/A noise and confirmation are
the primary's). Each other level gets a look of its own at every look of the primary, at the same
per-look level further divided by the number of other levels (Bonferroni over them: checking more
levels does not raise the chance of rejecting a candidate that changes none), and a `regression`
at any of them (its whole CI below 1) makes the verdict a regression: a launch option that helps
at 8 but slows 1 down beyond its CI is not kept. Other levels' gains are reported, never required.
"""

from __future__ import annotations

from agent.decision.stats.rule import by_window, look
from state.measurement.decision import DecisionConfig, LaunchNoise, Look, Verdict
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig


def at_level(m: Measurement, level: int) -> Measurement:
    """`m` with only the windows at `level` and their requests, bench_serving's beside it too
    (pure); a measurement without windows as it is."""
    if not m.windows:
        return m
    windows = [w for w in m.windows if w.concurrency == level]
    kept = {w.index for w in windows}
    beside = at_level(m.beside, level) if m.beside is not None else None
    requests = [r for r in m.requests if r.window in kept]
    return m.model_copy(update={"windows": windows, "requests": requests, "beside": beside})


def level_looks(
    reference: Measurement,
    candidate: Measurement,
    workload: WorkloadConfig | None,
    noise: LaunchNoise,
    cfg: DecisionConfig,
    k: int,
    drift: float = 1.0,
) -> list[Look]:
    """The rule at look `k` on each level but the primary, Bonferroni over them (pure); [] for a
    single level or without a workload."""
    others = workload.levels[1:] if workload is not None else []
    if workload is None or not others:
        return []
    strict = cfg.model_copy(update={"confidence": 1.0 - (1.0 - cfg.confidence) / len(others)})
    out = []
    for c in others:
        at = workload.at(c)
        ref, cand = (by_window(at_level(m, c), at) for m in (reference, candidate))
        lk = look(ref, cand, noise, strict, k, drift)
        out.append(lk.model_copy(update={"concurrency": c}))
    return out


def with_levels(verdict: Verdict, others: list[Look]) -> Verdict:
    """The verdict once the other levels were looked at: a regression at any of them is a
    regression; else the primary's verdict (pure)."""
    return "regression" if any(lk.verdict == "regression" for lk in others) else verdict
