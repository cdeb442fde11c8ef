"""Cross-host arms as pure functions: a two-host crossover with the launch as the unit of evidence.

In each round both hosts run at the same time, the session's own host one tree and the reference
host (`[decide] reference_host`) the other, swapping every round: round 1 the candidate here and
the reference there, round 2 the other way round, and so on. Each launch gives one location
(`rule.arm_location`). A host's own speed (another GPU, another machine) shifts every location on
it by the same amount, so it is estimated away: per host h, d_h = mean(ref_h) - mean(cand_h), and
the effect is the mean of the d_h (> 0: candidate faster), in which a host bias cancels exactly
(pooling all launches of an arm would not: after an odd number of rounds one host holds more of
each arm's launches). The variance of one launch's location is pooled within the (host, arm)
cells (df = launches - cells, 4 cells), with a stored A/A estimate as a prior of its own df as
alternating arms pool it (`replicates.prior_of`), so SE = sd x sqrt(sum_h (1/n_ref_h +
1/n_cand_h)) / 2 and the interval is a t-interval of that df. Looks after each round once the
df are positive (round 3, or round 2 with a prior: a round-1 host holds one arm only), Bonferroni
over the looks planned. The rounds R are planned like alternating arms' launches
(`replicates.launches_per_arm`): the fewest for which (t + z_power) x sigma x SE-factor(R) clears
log(1 + keep_gain) - log(1 + min_gain); after R rounds each arm has R launches, and for even R
SE-factor = sqrt(2 / R), alternating arms' with R launches per arm.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Literal

from agent.decision.stats.replicates import kept_by, launches_look, plan_text, planned, prior_of, t_quantile
from state.measurement.decision import DecisionConfig, LaunchNoise, Look

Arm = Literal["reference", "candidate"]
Cells = Mapping[tuple[str, Arm], Sequence[float]]
"""Launch locations by (host, arm)."""


def session_arm(r: int) -> Arm:
    """The session host's arm in round r (1-based): the candidate in odd rounds (pure)."""
    return "candidate" if r % 2 else "reference"


def other(arm: Arm) -> Arm:
    """The arm the other host runs in the same round (pure)."""
    return "reference" if arm == "candidate" else "candidate"


def se_factor(rounds: int) -> float:
    """SE of the effect per unit of launch SD after `rounds` rounds: sqrt(sum_h (1/n_ref_h +
    1/n_cand_h)) / 2 (each host holds ceil(R/2) launches of one arm and floor(R/2) of the other);
    infinite before round 2 (pure)."""
    more, fewer = (rounds + 1) // 2, rounds // 2
    if fewer == 0:
        return math.inf
    return math.sqrt(2.0 * (1.0 / more + 1.0 / fewer)) / 2.0


def crossover_effect(
    cells: Cells, level: float, prior: tuple[float, int] = (0.0, 0)
) -> tuple[float, float, float, float, int] | None:
    """(shift, low, high, sd, df): the mean over hosts of mean(ref_h) - mean(cand_h) on the log
    scale, two-sided at `level` (low/high infinite without any df); None while a host lacks an arm
    (pure)."""
    hosts = sorted({h for h, _ in cells})
    diffs, factor, ss, df = [], 0.0, 0.0, 0
    for h in hosts:
        ref, cand = cells.get((h, "reference"), ()), cells.get((h, "candidate"), ())
        if not ref or not cand:
            return None
        diffs.append(sum(ref) / len(ref) - sum(cand) / len(cand))
        factor += 1.0 / len(ref) + 1.0 / len(cand)
        for arm in (ref, cand):
            mean = sum(arm) / len(arm)
            ss += sum((x - mean) ** 2 for x in arm)
            df += len(arm) - 1
    sd0, df0 = prior
    ss, df = ss + df0 * sd0 * sd0, df + df0
    shift = sum(diffs) / len(diffs)
    if df == 0:
        return shift, -math.inf, math.inf, 0.0, 0
    sd = math.sqrt(ss / df)
    half = t_quantile(0.5 + level / 2.0, df) * sd * math.sqrt(factor) / len(hosts)
    return shift, shift - half, shift + half, sd, df


def naive_shift(cells: Cells) -> float:
    """mean(all reference launches) - mean(all candidate launches), hosts ignored: what a host bias
    leaks into (for comparison only) (pure)."""
    ref = [x for (_, arm), xs in cells.items() if arm == "reference" for x in xs]
    cand = [x for (_, arm), xs in cells.items() if arm == "candidate" for x in xs]
    return sum(ref) / len(ref) - sum(cand) / len(cand)


def first_look(prior_df: int) -> int:
    """The first round with positive df: 3, or 2 with a prior (pure)."""
    return 2 if prior_df > 0 else 3


def looks_of(rounds: int, prior_df: int) -> int:
    """Looks planned over `rounds` rounds (one after each round from `first_look`) (pure)."""
    return max(1, rounds - first_look(prior_df) + 1)


def crossover_look(
    cells: Cells, cfg: DecisionConfig, look: int, of: int, prior: tuple[float, int] = (0.0, 0)
) -> tuple[Look, LaunchNoise]:
    """The rule once on the launches so far (`look` of `of` planned), and the launch noise it rests
    on (pure); the Look's `requests_*` count launches (both hosts)."""
    level = 1.0 - (1.0 - cfg.confidence) / of
    n_ref = sum(len(xs) for (_, arm), xs in cells.items() if arm == "reference")
    n_cand = sum(len(xs) for (_, arm), xs in cells.items() if arm == "candidate")
    return launches_look(cfg, look, of, crossover_effect(cells, level, prior), n_ref, n_cand)


def half_width(sigma: float, rounds: int, cfg: DecisionConfig, prior_df: int = 0) -> float:
    """What `rounds` planned rounds must clear beyond the true effect: (t + z_power) x the effect's
    SE at the level of the looks planned, df = 2 rounds - 4 + the prior's (pure)."""
    df = 2 * rounds - 4 + prior_df
    if df <= 0:
        return math.inf
    level = 1.0 - (1.0 - cfg.confidence) / looks_of(rounds, prior_df)
    t = t_quantile(0.5 + level / 2.0, df)
    return (t + NormalDist().inv_cdf(cfg.keep_power)) * sigma * se_factor(rounds)


def rounds_planned(noise: LaunchNoise | None, cfg: DecisionConfig) -> int:
    """The fewest rounds (>= `first_look`) with which a true gain worth keeping is accepted with
    `keep_power` under `noise`, at most `max_launches_per_arm` (but never fewer than one look
    needs) (pure)."""
    return planned(noise, cfg, half_width, first_look(prior_of(noise)[1]))[0]


def smallest_kept(noise: LaunchNoise | None, cfg: DecisionConfig, rounds: int) -> float:
    """The smallest true speedup `rounds` rounds keep with `keep_power` (pure)."""
    return kept_by(noise, cfg, half_width, rounds)


def plan_line(noise: LaunchNoise | None, cfg: DecisionConfig) -> str:
    """`cross-host arms (reference host b): up to 4 rounds (...); smallest gain kept ... 1.21x`."""
    r, kept = planned(noise, cfg, half_width, first_look(prior_of(noise)[1]))
    how = f"{r} rounds, each tree launched once a round, on the two hosts in turn"
    return plan_text(noise, cfg, f"cross-host arms (reference host {cfg.reference_host})", how, kept)
