"""The power a session has, as pure functions: the smallest speedup it could keep, and the
requests and looks a candidate needs for the gain worth keeping, up to a budget.

The rule (agent/decision/stats/rule.py) accepts when the lower end of the speedup CI at a look clears
1 + `min_gain`. At the last look both arms hold `repeats x looks` requests per prompt (a sequential
reference is measured with that budget up front; an interleaved one grows with the candidate), so
the log shift's standard error there is

    SE^2 = 2 sigma^2 + (pi / 3) s^2 (2 / n) (n / (n - 1)) / P     (n = repeats x looks, P prompts)

with sigma the launch noise the rule uses (one launch's effect, two launches) and s the per-request
SD of log TPOT within a prompt (pi / 3: the Hodges-Lehmann shift's variance over the mean
difference's for normal data; n / (n - 1): the rule's widening of the bootstrap). A true speedup g
is kept at the last look with probability `keep_power` (`[decide]`, 80% by default) when

    log g >= log(1 + min_gain) + (z_{1 - alpha / (2 looks)} + z_keep_power) SE

(alpha = 1 - confidence, Bonferroni over the looks, as the rule does); that g is the power line.
The launch-noise term does not shrink with requests: `floor` is g with unlimited requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from state.measurement.decision import DecisionConfig, LaunchNoise
from state.measurement.power import Power

MIN_REPEATS = 2
"""Fewest requests per prompt per look (a look needs two to estimate a spread)."""
CALIBRATION_SD = 0.0025
"""The sampling SD of one A/A launch's location that calibration measures down to: half the 0.5%
floor the rule puts under a measured launch noise (`noise.launch_noise`), so the sampling error adds
at most ~12% to it (sqrt(1 + 1/4)); more requests on the same launch buy nothing the rule uses."""


def request_spread(arms: Sequence[Sequence[np.ndarray]]) -> float:
    """Per-request SD of log TPOT within a prompt, pooled over every prompt of every arm given
    (each arm one launch's requests, one array per prompt); 0 without two requests of a prompt."""
    ss, df = 0.0, 0
    for arm in arms:
        for a in arm:
            if len(a) >= 2:
                ss += float(np.sum((a - np.mean(a)) ** 2))
                df += len(a) - 1
    return math.sqrt(ss / df) if df else 0.0


def calibration_requests(spread_log: float, prompts: int, most: int) -> int:
    """Fewest requests per prompt (1 to `most`) that measure an A/A launch's location (the mean over
    `prompts` of each prompt's median log TPOT) to `CALIBRATION_SD`: its sampling variance is at
    most (pi / 2) s^2 / (n P) (the median's for normal data; less for n of 1 or 2), so 1 on a GPU
    host whose requests repeat to 0.2%, `most` on a loaded CPU's 5-20%; `most` when the spread is
    unknown (no prompt measured twice) (pure)."""
    if spread_log <= 0.0:
        return most
    n = math.ceil((math.pi / 2.0) * spread_log**2 / (max(prompts, 1) * CALIBRATION_SD**2))
    return max(1, min(most, n))


def standard_error(sigma_log: float, spread_log: float, prompts: int, n: float) -> float:
    """SE of the combined log shift with `n` requests per prompt in each arm (pure)."""
    if n <= 1:
        return math.inf
    widen = n / (n - 1) if math.isfinite(n) else 1.0  # the rule's small-sample widening
    sampling = (math.pi / 3.0) * spread_log**2 * (2.0 / n) * widen / max(prompts, 1)
    return math.sqrt(2.0 * sigma_log**2 + sampling)


def keeps(
    sigma_log: float, spread_log: float, prompts: int, repeats: float, looks: int, cfg: DecisionConfig
) -> float:
    """The smallest true speedup kept with probability `cfg.keep_power` at the last of `looks` looks
    of `repeats` requests per prompt each (pure; `repeats = inf`: the launch noise's floor)."""
    alpha = (1.0 - cfg.confidence) / looks
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0) + NormalDist().inv_cdf(cfg.keep_power)
    se = standard_error(sigma_log, spread_log, prompts, repeats * looks)
    return (1.0 + cfg.min_gain) * math.exp(z * se)


def sized(
    noise: LaunchNoise, spread_log: float, prompts: int, repeats: int, cfg: DecisionConfig, unit: str
) -> Power:
    """The power of `repeats` x `cfg.looks`; with `cfg.keep_gain`, the requests and looks chosen for
    it: the most looks (up to `cfg.looks`) whose fewest repeats reach 1 + keep_gain within
    `cfg.max_requests_per_prompt` (repeats x looks), else `repeats` x `cfg.looks` as given when
    their gain is within 5% (in log) of the smallest the budget keeps, or the fewest requests that
    are: no budget spent where the launch noise alone holds the gain up (pure)."""
    s = noise.sigma_log
    common = {"noise": noise, "spread_log": spread_log, "prompts": prompts, "unit": unit}
    common |= {"probability": cfg.keep_power}
    floor = keeps(s, spread_log, prompts, math.inf, cfg.looks, cfg)
    if cfg.keep_gain is None:
        g = keeps(s, spread_log, prompts, repeats, cfg.looks, cfg)
        return Power(keeps=g, floor=floor, repeats=repeats, looks=cfg.looks, **common)
    aim, budget = 1.0 + cfg.keep_gain, cfg.max_requests_per_prompt
    tried = [
        (keeps(s, spread_log, prompts, reps, looks, cfg), reps, looks)
        for looks in range(cfg.looks, 0, -1)
        for reps in range(MIN_REPEATS, budget // looks + 1)
    ]
    reached = [t for t in tried if t[0] <= aim]  # in order: most looks first, fewest repeats first
    if not reached:  # as configured, or the fewest requests, within 5% (in log) of the least
        least = min(g for g, _, _ in tried)
        given = (keeps(s, spread_log, prompts, repeats, cfg.looks, cfg), repeats, cfg.looks)
        near = [t for t in [given, *tried] if math.log(t[0]) <= 1.05 * math.log(least)]
        reached = [given if given in near else min(near, key=lambda t: (t[1] * t[2], -t[2]))]
    g, reps, looks = reached[0]
    floor = keeps(s, spread_log, prompts, math.inf, looks, cfg)
    return Power(keeps=g, floor=floor, repeats=reps, looks=looks, aim=aim, budget=budget, **common)


def more_pairs(pairs: int, noise: LaunchNoise, cfg: DecisionConfig) -> bool:
    """Whether another A/A pair is worth a launch: fewer than `min_aa_pairs` are stored, or
    `keep_gain` is set and the launch noise alone keeps it out of reach (its floor above 1 +
    keep_gain; more requests cannot help there, a tighter bound from more pairs can) (pure)."""
    if pairs < cfg.min_aa_pairs:
        return True
    floor = keeps(noise.sigma_log, 0.0, 1, math.inf, cfg.looks, cfg)
    return cfg.keep_gain is not None and floor > 1.0 + cfg.keep_gain
