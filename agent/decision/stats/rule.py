"""The decision rule, as pure functions of per-request timings.

- The unit of evidence is one request (its tokens are autocorrelated): per request, TPOT =
  (t_last - t_first) / (n - 1), the mean inter-token latency, taken on the log scale. Under
  `[workload]` (requests at concurrency share decode batches, so they are not independent) it is
  one window instead: its objective as a cost on the log scale (log of the time per output token
  or per request for a throughput, log of the TPOT/TTFT percentile), all windows one stratum.
- Estimator: per prompt, the Hodges-Lehmann shift between the arms (median of every pairwise
  difference of log TPOT, reference minus candidate); the mean over prompts; speedup = exp(shift).
- Uncertainty: a bootstrap stratified by prompt that resamples whole requests of each arm, plus a
  normal draw for the launch-to-launch noise of the two launches (variance 2 sigma^2, sigma from A/A
  launches). Percentile interval at level 1 - (1 - confidence) / looks (Bonferroni over a fixed
  number of looks, so the intervals of all looks hold together with `confidence`).
- Verdicts: `regression` if the whole CI lies below 1; `accepted` if it lies above 1 + min gain;
  `rejected` if its upper end is below 1 + min gain; else `undecided` while looks remain, then
  `inconclusive`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from state.measurement.decision import ArmStats, DecisionConfig, LaunchNoise, Look, Verdict
from state.measurement.measure import Measurement, RequestRecord, Window
from state.measurement.workload import OBJECTIVES, WorkloadConfig

Arm = list[np.ndarray]
"""One arm: log TPOT of each request, one array per prompt (in prompt order)."""


def log_tpot(itl_ms: Sequence[float]) -> float:
    """log of (t_last - t_first) / (n - 1) in ms: the request's mean inter-token latency."""
    if not itl_ms:
        raise ValueError("a request with fewer than 2 tokens has no TPOT")
    return math.log(max(sum(itl_ms) / len(itl_ms), 1e-9))


def by_prompt(requests: Sequence[RequestRecord], n_prompts: int) -> Arm:
    """Requests' log TPOT grouped by prompt index (requests with < 2 tokens are skipped). Where a
    prompt has requests that timed their tokens, only those: a stream the server merged or a
    loaded client read at once has gaps of microseconds, no decode time (`RequestRecord.timed`)."""
    groups: list[list[RequestRecord]] = [[] for _ in range(n_prompts)]
    for r in requests:
        if r.itl_ms and 0 <= r.prompt_index < n_prompts:
            groups[r.prompt_index].append(r)
    return [
        np.asarray([log_tpot(r.itl_ms) for r in ([x for x in g if x.timed] or g)], dtype=float)
        for g in groups
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of `values`, linear between order statistics (pure)."""
    return float(np.quantile(np.asarray(values, dtype=float), q)) if values else 0.0


def goodput_tokens(requests: Sequence[RequestRecord], workload: WorkloadConfig) -> int:
    """Tokens of the requests that meet the workload's SLOs (pure)."""
    return sum(r.completion_tokens for r in requests if workload.meets_slo(r.tpot_ms, r.ttft_ms))


def window_metric(window: Window, requests: Sequence[RequestRecord], workload: WorkloadConfig) -> float:
    """The window's value of the workload's objective in its own unit (tok/s, req/s or ms) (pure)."""
    objective = workload.objective
    if objective == "output_throughput":
        return window.output_tokens / window.wall_s
    if objective == "request_throughput":
        return window.requests / window.wall_s
    if objective == "goodput":
        return goodput_tokens(requests, workload) / window.wall_s
    kind, q = objective.split("_")
    values = [r.tpot_ms for r in requests if r.itl_ms] if kind == "tpot" else [r.ttft_ms for r in requests]
    return percentile(values, int(q[1:]) / 100)


def pooled_metric(m: Measurement, workload: WorkloadConfig) -> float | None:
    """The objective over all of a measurement's windows as one (tokens or requests over their
    summed wall time, a percentile over all their requests); None without windows (pure)."""
    if not m.windows:
        return None
    pooled = Window(
        index=0,
        concurrency=m.windows[0].concurrency,
        requests=sum(w.requests for w in m.windows),
        output_tokens=sum(w.output_tokens for w in m.windows),
        wall_s=sum(w.wall_s for w in m.windows) or 1.0,
    )
    return window_metric(pooled, m.requests, workload)


def window_cost(window: Window, requests: Sequence[RequestRecord], workload: WorkloadConfig) -> float:
    """log of the window's cost (lower is better): minus the log of a throughput, the log of a
    latency (pure); so a speedup is a throughput ratio or a latency ratio alike. A window with no
    request within the SLOs counts as 1e-9 tok/s of goodput."""
    value = max(window_metric(window, requests, workload), 1e-9)
    return -math.log(value) if OBJECTIVES[workload.objective][2] else math.log(value)


def by_window(m: Measurement, workload: WorkloadConfig) -> Arm:
    """The costs of the measurement's windows as one stratum; with several concurrency levels
    those at the primary level only."""
    several = len(workload.levels) > 1
    windows = [w for w in m.windows if not several or w.concurrency == workload.primary]
    return [
        np.asarray(
            [window_cost(w, [r for r in m.requests if r.window == w.index], workload) for w in windows],
            dtype=float,
        )
    ]


def arm_of(m: Measurement, n_prompts: int, workload: WorkloadConfig | None) -> Arm:
    """The rule's view of one arm: its windows under `[workload]` (at the primary level), else its
    requests by prompt."""
    if workload is not None and m.windows:
        return by_window(m, workload)
    return by_prompt(m.requests, n_prompts)


def hodges_lehmann(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Median of every pairwise difference reference_i - candidate_j (> 0: candidate faster)."""
    return float(np.median(np.subtract.outer(reference, candidate)))


def combined_shift(reference: Arm, candidate: Arm) -> float:
    """The per-prompt Hodges-Lehmann shifts, averaged over prompts (each prompt weighs the same)."""
    return float(np.mean([hodges_lehmann(r, c) for r, c in zip(reference, candidate, strict=True)]))


def _resampled_hl(ref: np.ndarray, cand: np.ndarray, b: int, rng: np.random.Generator) -> np.ndarray:
    """`b` bootstrap replicates of one prompt's HL shift, resampling whole requests of each arm."""
    rs = ref[rng.integers(0, len(ref), size=(b, len(ref)))]
    cs = cand[rng.integers(0, len(cand), size=(b, len(cand)))]
    diffs = rs[:, :, None] - cs[:, None, :]
    return np.median(diffs.reshape(b, -1), axis=1)


def bootstrap_shifts(reference: Arm, candidate: Arm, b: int, seed: int) -> np.ndarray:
    """Bootstrap replicates of the combined shift, stratified by prompt.

    Each prompt's spread is widened by sqrt(n / (n - 1)) for its smaller arm, the bootstrap's known
    small-sample shrinkage of a variance.
    """
    rng = np.random.default_rng(seed)
    per_prompt = []
    for ref, cand in zip(reference, candidate, strict=True):
        reps = _resampled_hl(ref, cand, b, rng)
        n = min(len(ref), len(cand))
        center = hodges_lehmann(ref, cand)
        per_prompt.append(center + (reps - center) * math.sqrt(n / (n - 1)))
    return np.mean(per_prompt, axis=0)


def verdict_of(low: float, high: float, min_gain: float, last_look: bool) -> Verdict:
    """The verdict for a speedup CI [low, high] (pure)."""
    if high < 1.0:
        return "regression"
    if low > 1.0 + min_gain:
        return "accepted"
    if high < 1.0 + min_gain:
        return "rejected"
    return "inconclusive" if last_look else "undecided"


def needs_confirmation(lk: Look, cfg: DecisionConfig) -> bool:
    """Whether an acceptance must be repeated on a fresh pair of launches (pure)."""
    return lk.verdict == "accepted" and cfg.confirm_below is not None and lk.ci_low < cfg.confirm_below


def replicated(first: Verdict, second: Verdict) -> Verdict:
    """The verdict once a second, independent pair of launches was judged: accepted only when both
    accepted; a regression on the second pair is a regression; anything else is inconclusive (pure)."""
    if first == second == "accepted":
        return "accepted"
    return "regression" if second == "regression" else "inconclusive"


def look(
    reference: Arm,
    candidate: Arm,
    noise: LaunchNoise,
    cfg: DecisionConfig,
    k: int,
    drift: float = 1.0,
) -> Look:
    """Apply the rule once, at look `k` (1-based) of `cfg.looks`.

    `drift` (>= 1) is how much faster the machine ran for one arm than for the other (a CPU probe
    before and after each batch): the CI is widened by that factor on both sides, so a change of
    machine state between the arms can never pass for a speedup or a regression."""
    n_ref = min(len(r) for r in reference)
    n_cand = min(len(c) for c in candidate)
    alpha = (1.0 - cfg.confidence) / cfg.looks
    common = {
        "look": k,
        "of": cfg.looks,
        "level": 1.0 - alpha,
        "prompts": len(reference),
        "requests_reference": n_ref,
        "requests_candidate": n_cand,
        "machine_drift": drift,
    }
    if n_ref < 2 or n_cand < 2:  # no spread to estimate: never decide on it
        shift = combined_shift(reference, candidate) if n_ref and n_cand else 0.0
        verdict: Verdict = "inconclusive" if k >= cfg.looks else "undecided"
        return Look(speedup=math.exp(shift), ci_low=0.0, ci_high=1e9, verdict=verdict, **common)  # no CI
    shift = combined_shift(reference, candidate)
    reps = bootstrap_shifts(reference, candidate, cfg.bootstrap, seed=7919 * k + n_cand)
    launch = np.random.default_rng(104729 + k).normal(0.0, math.sqrt(2.0) * noise.sigma_log, len(reps))
    low, high = np.quantile(reps + launch, [alpha / 2, 1 - alpha / 2])
    ci_low, ci_high = math.exp(float(low)) / drift, math.exp(float(high)) * drift
    verdict = verdict_of(ci_low, ci_high, cfg.min_gain, last_look=k >= cfg.looks)
    return Look(speedup=math.exp(shift), ci_low=ci_low, ci_high=ci_high, verdict=verdict, **common)


def arm_location(arm: Arm) -> float:
    """A launch's location: the mean over prompts of the median log TPOT (what A/A launches compare)."""
    return float(np.mean([np.median(a) for a in arm if len(a)]))


def arm_stats(
    requests: Sequence[RequestRecord],
    n_prompts: int,
    warmups: int,
    windows: Sequence[Window] = (),
    workload: WorkloadConfig | None = None,
) -> ArmStats:
    """Per-arm medians and tails for the report; outliers are flagged (counted), never dropped;
    with `windows` (`[workload]`) also throughputs and p99s over them. ITLs are the timed streams'
    (`RequestRecord.timed`: a merged stream's 0.0 ms gaps are the API server's, not the model's),
    all where none is."""
    gaps = [r.itl_ms for r in [x for x in requests if x.timed] or requests if r.itl_ms]
    itl = np.concatenate([np.asarray(g, dtype=float) for g in gaps] or [np.zeros(1)])
    outliers = 0
    for a in by_prompt(requests, n_prompts):
        if len(a) >= 4:
            q1, med, q3 = np.quantile(a, [0.25, 0.5, 0.75])
            outliers += int(np.sum(np.abs(a - med) > 3 * max(q3 - q1, 1e-9)))
    return ArmStats(
        tpot_ms_median=float(np.median([math.exp(log_tpot(r.itl_ms)) for r in requests if r.itl_ms] or [0])),
        itl_ms_p50=float(np.quantile(itl, 0.5)),
        itl_ms_p99=float(np.quantile(itl, 0.99)),
        ttft_ms_median=float(np.median([r.ttft_ms for r in requests] or [0])),
        requests=len(requests),
        warmups_discarded=warmups,
        outliers=outliers,
        **(serving_stats(requests, windows, workload) if windows else {}),
    )


def serving_stats(
    requests: Sequence[RequestRecord], windows: Sequence[Window], workload: WorkloadConfig | None = None
) -> dict[str, float | int | None]:
    """An arm's serving figures over its windows: throughputs (total over wall time) and p99s;
    goodput where the workload is judged on it."""
    wall = sum(w.wall_s for w in windows) or 1.0
    good = workload is not None and workload.objective == "goodput"
    return ({"goodput_tok_per_s": goodput_tokens(requests, workload) / wall} if good and workload else {}) | {
        "windows": len(windows),
        "concurrency": windows[0].concurrency,
        "output_tok_per_s": sum(w.output_tokens for w in windows) / wall,
        "requests_per_s": sum(w.requests for w in windows) / wall,
        "tpot_ms_p99": percentile(timed, 0.99)
        if (timed := [r.tpot_ms for r in requests if r.timed])
        else None,
        "ttft_ms_p99": percentile([r.ttft_ms for r in requests], 0.99),
    }
