"""Alternating arms as pure functions: the launch is the unit of evidence.

Each tree is launched k times in turn on the same host (one server at a time) and each launch
gives one location (`rule.arm_location`: mean over prompts of the median log TPOT, or the median
window cost under `[workload]`). One-way random-effects model: a launch's location = its tree's
mean + a launch effect (SD sigma_b) + its sampling error (SD sigma_w / sqrt(n)); with the same
requests per launch the locations of one tree vary with variance sigma_b^2 + sigma_w^2 / n, which
the replicate launches estimate directly (the within-arm variance pooled over both arms, df =
k_ref + k_cand - 2). The effect is mean(ref) - mean(cand) (> 0: candidate faster), with a
t-interval of that df. A stored A/A estimate of the same target on the same host (`LaunchNoise`
with source `aa`) joins as a prior of its own degrees of freedom (pooled variance, as a moderated
t: s^2 = (df_r s_r^2 + df_0 s_0^2) / (df_r + df_0)); the conservative default never does, since it
is no measurement. Looks after each round from the second (Bonferroni over the rounds planned).
The number of launches is planned so that a true gain worth keeping (`[decide] keep_gain`, else
1.05x) is accepted with `keep_power` (80%), bounded by `max_launches_per_arm`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from statistics import NormalDist

from agent.decision.stats.rule import verdict_of
from state.measurement.decision import DecisionConfig, LaunchNoise, Look, Verdict


def t_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer `df` >= 1 (exact finite series, Abramowitz and
    Stegun 26.7.3-4) (pure)."""
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 1:
        term, total = c, c if df > 1 else 0.0
        for j in range(3, df - 1, 2):  # cos + (2/3) cos^3 + (2*4)/(3*5) cos^5 + ... up to cos^(df-2)
            term *= c * c * (j - 1) / j
            total += term
        return min(1.0, 2.0 / math.pi * (theta + s * total))
    term, total = 1.0, 1.0
    for j in range(2, df - 1, 2):  # 1 + (1/2) cos^2 + (1*3)/(2*4) cos^4 + ... up to cos^(df-2)
        term *= c * c * (j - 1) / j
        total += term
    return min(1.0, s * total)


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p > 0.5) of Student's t with integer `df` (bisection on the CDF) (pure)."""
    target = 2.0 * p - 1.0
    low, high = 0.0, 1.0
    while t_two_sided(high, df) < target:
        high *= 2.0
    for _ in range(60):
        mid = (low + high) / 2.0
        low, high = (mid, high) if t_two_sided(mid, df) < target else (low, mid)
    return (low + high) / 2.0


def prior_of(noise: LaunchNoise | None) -> tuple[float, int]:
    """(SD, df) a stored A/A estimate adds to the replicates; (0, 0) for the default (pure)."""
    if noise is None or noise.source != "aa" or noise.paired or noise.estimate_log is None:
        return 0.0, 0
    return noise.estimate_log, noise.df


def between_launch_sd(
    reference: Sequence[float], candidate: Sequence[float], prior: tuple[float, int] = (0.0, 0)
) -> tuple[float, int]:
    """(pooled SD of one launch's location, its df): within-arm spread of the replicate launches,
    with the prior's (SD, df) pooled in (pure); (0, 0) when neither has any df."""
    ss, df = 0.0, 0
    for arm in (reference, candidate):
        if len(arm) >= 2:
            mean = sum(arm) / len(arm)
            ss += sum((x - mean) ** 2 for x in arm)
            df += len(arm) - 1
    sd0, df0 = prior
    ss, df = ss + df0 * sd0 * sd0, df + df0
    return (math.sqrt(ss / df), df) if df else (0.0, 0)


def effect_ci(
    reference: Sequence[float], candidate: Sequence[float], level: float, prior: tuple[float, int] = (0.0, 0)
) -> tuple[float, float, float, float, int]:
    """(shift, low, high, sd, df) of mean(ref) - mean(cand) on the log scale, two-sided at `level`
    (low/high infinite without any df) (pure)."""
    shift = sum(reference) / len(reference) - sum(candidate) / len(candidate)
    sd, df = between_launch_sd(reference, candidate, prior)
    if df == 0:
        return shift, -math.inf, math.inf, sd, df
    half = t_quantile(0.5 + level / 2.0, df) * sd * math.sqrt(1 / len(reference) + 1 / len(candidate))
    return shift, shift - half, shift + half, sd, df


def alternating_look(
    reference: Sequence[float],
    candidate: Sequence[float],
    cfg: DecisionConfig,
    look: int,
    of: int,
    prior: tuple[float, int] = (0.0, 0),
) -> tuple[Look, LaunchNoise]:
    """The rule once, on the launches so far (`look` of `of` planned looks), and the between-launch
    noise it rests on (pure); the Look's `requests_*` count launches."""
    level = 1.0 - (1.0 - cfg.confidence) / of
    shift, low, high, sd, df = effect_ci(reference, candidate, level, prior)
    return launches_look(cfg, look, of, (shift, low, high, sd, df), len(reference), len(candidate))


def launches_look(
    cfg: DecisionConfig,
    look: int,
    of: int,
    est: tuple[float, float, float, float, int] | None,
    n_ref: int,
    n_cand: int,
) -> tuple[Look, LaunchNoise]:
    """The Look of an effect estimated over launches (`est`: log shift, its interval, the SD per
    launch and its df; None or df 0: nothing estimable yet) and its launch noise, for alternating
    and cross-host arms alike; `requests_*` count launches (pure)."""
    level = 1.0 - (1.0 - cfg.confidence) / of
    last = look >= of
    shift, low, high, sd, df = est if est is not None else (0.0, 0.0, 0.0, 0.0, 0)
    if df == 0:
        verdict: Verdict = "inconclusive" if last else "undecided"
        ci_low, ci_high = 0.0, 1e9
    else:
        ci_low, ci_high = math.exp(low), math.exp(high)
        verdict = verdict_of(ci_low, ci_high, cfg.min_gain, last_look=last)
    lk = Look(
        look=look,
        of=of,
        speedup=math.exp(shift),
        ci_low=ci_low,
        ci_high=ci_high,
        level=level,
        prompts=1,
        requests_reference=n_ref,
        requests_candidate=n_cand,
        verdict=verdict,
    )
    noise = LaunchNoise(sigma_log=sd, estimate_log=sd, launches=n_ref + n_cand, source="replicates", df=df)
    return lk, noise


def half_width(sigma: float, k: int, cfg: DecisionConfig, prior_df: int = 0) -> float:
    """What a planned k launches per arm must clear beyond the true effect: (t + z_power) x the
    effect's SE, at the level of k - 1 looks, with `sigma` per launch (pure)."""
    level = 1.0 - (1.0 - cfg.confidence) / (k - 1)
    t = t_quantile(0.5 + level / 2.0, 2 * k - 2 + prior_df)
    return (t + NormalDist().inv_cdf(cfg.keep_power)) * sigma * math.sqrt(2.0 / k)


PLANNED_GAIN = 0.05
"""The gain alternating launches are planned for when `[decide] keep_gain` names none (1.05x)."""


def worth_keeping(cfg: DecisionConfig) -> float:
    """The true speedup the launches are planned to keep: 1 + `keep_gain`, else 1.05 (pure)."""
    return 1.0 + (cfg.keep_gain if cfg.keep_gain is not None else PLANNED_GAIN)


Width = Callable[[float, int, DecisionConfig, int], float]
"""A planned interval's half-width beyond the true effect: (sigma, launches or rounds, cfg, prior df)."""


def planned(noise: LaunchNoise | None, cfg: DecisionConfig, width: Width, low: int) -> tuple[int, float]:
    """The fewest launches per arm (or rounds) n >= `low` whose `width` lets a true gain worth
    keeping (`worth_keeping`) be accepted with `keep_power` under `noise`, at most
    `max_launches_per_arm` (never under `low`); and the smallest true speedup n keeps (pure)."""
    sigma = noise.sigma_log if noise is not None else cfg.default_launch_noise
    margin = math.log(worth_keeping(cfg)) - math.log(1.0 + cfg.min_gain)
    df0 = prior_of(noise)[1]
    high = max(low, cfg.max_launches_per_arm)
    n = next((n for n in range(low, high + 1) if margin > 0 and width(sigma, n, cfg, df0) <= margin), high)
    return n, kept_by(noise, cfg, width, n)


def kept_by(noise: LaunchNoise | None, cfg: DecisionConfig, width: Width, n: int) -> float:
    """The smallest true speedup n launches per arm (or rounds) keep with `keep_power` (pure)."""
    sigma = noise.sigma_log if noise is not None else cfg.default_launch_noise
    return math.exp(math.log(1.0 + cfg.min_gain) + width(sigma, n, cfg, prior_of(noise)[1]))


def smallest_kept(noise: LaunchNoise | None, cfg: DecisionConfig, k: int) -> float:
    """The smallest true speedup that k launches per arm keep with `keep_power` (pure)."""
    return kept_by(noise, cfg, half_width, k)


def plan_text(noise: LaunchNoise | None, cfg: DecisionConfig, arms: str, how: str, kept: float) -> str:
    """The baseline's plan line, for alternating and cross-host arms alike (pure)."""
    sigma = noise.sigma_log if noise is not None else cfg.default_launch_noise
    return (
        f"{arms}: up to {how} (launch noise {sigma:.1%}, gain worth keeping "
        f"{worth_keeping(cfg):.2f}x, at most {cfg.max_launches_per_arm}); smallest gain kept with "
        f"{cfg.keep_power:.0%} power {kept:.2f}x"
    )


def launches_per_arm(noise: LaunchNoise | None, cfg: DecisionConfig) -> int:
    """The fewest launches per arm (>= 2) with which a true gain worth keeping is accepted with
    `keep_power` under `noise`, at most `max_launches_per_arm` (pure)."""
    return planned(noise, cfg, half_width, 2)[0]


def plan_line(noise: LaunchNoise | None, cfg: DecisionConfig) -> str:
    """`alternating arms: up to 4 launches per arm (...); smallest gain kept with 80% power 1.21x`."""
    k, kept = planned(noise, cfg, half_width, 2)
    return plan_text(noise, cfg, "alternating arms", f"{k} launches per arm", kept)
