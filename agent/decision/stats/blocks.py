"""Paired blocks (alternating arms of sessions with `LoopOptions.paired_blocks`), as pure functions.

One server fits the host, so the two trees are launched in turn, and each round is a block of one
launch of each tree in a balanced order (C R | R C | C R | ...). The unit of evidence is a block's
difference d = location(R) - location(C) on the log scale (> 0: the candidate is faster): what the
host did to both launches of a block cancels within it, and a drift linear in time cancels over
each two blocks, so no CPU probe widens anything.

The effect is the mean of the blocks' d, its interval a t-interval whose variance is pooled:

    s^2 = (SS_hist + SS_trial) / (df_hist + df_trial)     (one launch's variance)
    SE  = sqrt(2 s^2 / n)                                 (n blocks)

- the trial's own blocks: SS of (d - mean d) / 2, n - 1 df (a block's difference holds two
  launches, so half its variance is one launch's);
- the history (`Pool`): every earlier trial's blocks of this engine on this host at this workload
  shape, stored as d / sqrt(2) grouped per trial (agent/decision/arms/blocks.py), plus the target's
  A/A launches (the baseline's and its A/A launch);
- the prior: the conservative default launch noise `sigma0` worth `nu0` (= `[decide] prior_df`, 1)
  degrees of freedom, used while nothing is measured (df 0) and replaced by the first measured
  degree of freedom: never a floor. A conjugate prior of even one df at 25% would outweigh a
  quiet GPU host's 1% launches for hundreds of df (0.25^2 = 625 x 0.01^2); the t quantile of the
  measured df is what keeps an estimate from two launches honest (t 12.7 at 95% for 1 df).

Pooling assumes the trial is as noisy as its history; where its own blocks' spread exceeds the
history's beyond chance (chi-square at `LOUDER`: the host got louder, or the history came from a
quieter time), the trial's own blocks alone make the interval, with their own df. On one H200 with
six sessions at once, a pool of four quiet calibration launches (0.2%) made 2 of 6 A/A sessions
read as regressions without this (benchmarks/README.md, "Paired blocks on one H200"). With one or
two blocks of its own a trial cannot always tell: against a history 15x quieter than the host it
is still called different ~8% of the time (simulated), against ~50% without the guard.

The t quantile has those degrees of freedom. Looks are
pre-registered before the trial: after every block from the first when the pool already has
`EARLY_DF` df, else from the second; Bonferroni over the looks planned. The verdict is three-way:
better (`accepted`), the same or worse (`rejected`: the CI excludes a gain worth keeping, said
`same` when it lies within +-`min_gain`; `regression`: wholly below 1), or not yet decided
(another block while the plan allows, then `inconclusive`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from agent.decision.stats.noise import chi2_quantile
from agent.decision.stats.replicates import launches_look, t_quantile
from state.measurement.decision import DecisionConfig, LaunchNoise, Look

if TYPE_CHECKING:
    from state.measurement.measure import Measurement
    from state.sessions.loop import LoopState

EARLY_DF = 4
"""Pooled df from which a trial looks already after its first block."""
LOUDER = 0.2
"""A trial's own blocks replace the history when their spread exceeds the history's at this level
(chi-square): a quieter history seldom narrows a noisier trial's interval. Simulated
(tests/unit/test_blocks.py): at 0.05 a trial on a host 15x louder than its history was called
different 8.5% of the time, at 0.2 7.8%, at 0.5 5.3%; a true 1.05x on a 1% host was kept 79%,
74% and 67% of the time."""


@dataclass(frozen=True)
class Pool:
    """What a trial's interval pools besides its own blocks: (sum of squares, df) on the scale of
    one launch's location, from history; and the prior."""

    ss: float
    """Sum of squared deviations from earlier trials' blocks and the target's A/A launches."""
    df: int
    """Their degrees of freedom."""
    sigma0: float
    """The prior's SD of one launch (the conservative default launch noise)."""
    nu0: int
    """The prior's weight in degrees of freedom."""
    guard: bool = True
    """Whether a trial louder than its history is judged on its own blocks (`LOUDER`); False only
    for sessions of the first paired-blocks plan (agent/decision/arms/blocks.py `first_plan`)."""

    def variance(self, ss: float = 0.0, df: int = 0) -> tuple[float, int]:
        """(pooled variance of one launch, its df) with `ss`, `df` of the trial's own blocks: the
        prior's (sigma0^2, nu0) while nothing is measured, the measurements' alone from their
        first degree of freedom on (their t quantile is what keeps few df honest)."""
        if self.df + df == 0:
            return self.sigma0**2, self.nu0
        if (
            self.guard
            and self.df
            and df
            and self.ss > 0
            and ss / (self.ss / self.df) > chi2_quantile(1.0 - LOUDER, df)
        ):
            return ss / df, df  # the trial is noisier than its history: its own blocks alone
        return (self.ss + ss) / (self.df + df), self.df + df

    def sd(self) -> float:
        """The pooled SD of one launch before the trial."""
        return math.sqrt(self.variance()[0])


def pool_of(groups: Sequence[Sequence[float]], aa: LaunchNoise | None, cfg: DecisionConfig) -> Pool:
    """The pool from history: `groups` of values on one launch's scale (each earlier trial's
    d / sqrt(2)), each contributing its within-group SS and n - 1 df, plus the A/A launches'
    measured estimate (`aa.estimate_log` with `aa.df`, whatever source) (pure)."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            mean = sum(g) / len(g)
            ss += sum((x - mean) ** 2 for x in g)
            df += len(g) - 1
    if aa is not None and aa.estimate_log is not None and aa.df and not aa.paired:
        ss, df = ss + aa.df * aa.estimate_log**2, df + aa.df
    return Pool(ss=ss, df=df, sigma0=cfg.default_launch_noise, nu0=cfg.prior_df)


def first_look(pool: Pool) -> int:
    """The block of the first look: 1 when the pool already has `EARLY_DF` df, else 2 (pure)."""
    return 1 if pool.df >= EARLY_DF else 2


def looks_planned(pool: Pool, blocks: int) -> int:
    """How many looks `blocks` blocks give, pre-registered (pure)."""
    return max(1, blocks - first_look(pool) + 1)


def block_effect(ds: Sequence[float], pool: Pool, level: float) -> tuple[float, float, float, float, int]:
    """(mean d, low, high, pooled SD of one launch, df) of the blocks' differences `ds` (pure)."""
    n = len(ds)
    mean = sum(ds) / n
    ss = sum((d - mean) ** 2 for d in ds) / 2.0  # a block's d holds two launches
    var, df = pool.variance(ss, n - 1)
    half = t_quantile(0.5 + level / 2.0, df) * math.sqrt(2.0 * var / n)
    return mean, mean - half, mean + half, math.sqrt(var), df


def block_look(
    ds: Sequence[float], pool: Pool, cfg: DecisionConfig, look: int, of: int
) -> tuple[Look, LaunchNoise]:
    """The rule once on the blocks so far (`look` of `of` pre-registered looks), and the pooled
    launch noise it rests on (pure); the Look's `requests_*` count blocks."""
    level = 1.0 - (1.0 - cfg.confidence) / of
    est = block_effect(ds, pool, level)
    lk, _ = launches_look(cfg, look, of, est, len(ds), len(ds))  # a Look over launches, counted in blocks
    sd, df = est[3], est[4]
    noise = LaunchNoise(sigma_log=sd, estimate_log=sd, launches=2 * len(ds), source="pooled", df=df)
    return lk, noise


def called(lk: Look, cfg: DecisionConfig) -> str:
    """The three-way call in words: `better`, `same` (the CI within +-min_gain), `worse`,
    `no gain worth keeping`, or `not yet decided` (pure)."""
    if lk.verdict == "accepted":
        return "better"
    if lk.verdict == "regression":
        return "worse"
    if lk.verdict == "rejected":
        same = lk.ci_low >= 1.0 / (1.0 + cfg.min_gain) and lk.ci_high <= 1.0 + cfg.min_gain
        return "same" if same else "no gain worth keeping"
    return "not yet decided"


def block_half_width(sd: float, df: int, n: int, looks: int, cfg: DecisionConfig) -> float:
    """What n blocks must clear beyond the true effect to keep it with `keep_power`: (t + z) x SE
    at the level of `looks` looks (pure)."""
    level = 1.0 - (1.0 - cfg.confidence) / looks
    t = t_quantile(0.5 + level / 2.0, df + n - 1)
    return (t + NormalDist().inv_cdf(cfg.keep_power)) * sd * math.sqrt(2.0 / n)


@dataclass(frozen=True)
class BlockPlan:
    """A trial's plan, made before it starts: blocks, launches, and what it costs and resolves."""

    blocks: int
    """Most blocks (two launches each, the first candidate launch `relaunch`'s)."""
    looks: int
    """Pre-registered looks."""
    block_s: float
    """Expected seconds of one block: two launches and their measurements."""
    kept: float
    """The smallest true speedup kept with `keep_power` at the last look."""
    why: str
    """What bounded the blocks."""
    power: float
    """`[decide] keep_power`."""

    def line(self, pool: Pool) -> str:
        """`paired blocks (C R | R C ...): up to 4 blocks (8 launches, ~3.1 min a trial ...) ...`."""
        return (
            f"paired blocks (C R | R C ...): up to {self.blocks} blocks ({2 * self.blocks} launches, "
            f"~{self.blocks * self.block_s / 60:.1f} min a trial at {self.block_s:.0f} s a block), "
            f"{self.looks} look(s) from block {self.blocks - self.looks + 1}; launch noise "
            + (
                f"{pool.sd():.1%} pooled over {pool.df} df; "
                if pool.df
                else f"{pool.sigma0:.0%} (the default, worth {pool.nu0} df until a launch pair is measured); "
            )
            + f"smallest gain kept with {self.power:.0%} power {self.kept:.2f}x; {self.why}"
        )


def plan_blocks(
    pool: Pool, cfg: DecisionConfig, launch_s: float, measure_s: float, min_looks: int = 1
) -> BlockPlan:
    """The trial's plan from the pooled noise and what a launch costs (pure): the fewest blocks
    that keep a gain worth keeping (`keep_gain`, else 1.05x) with `keep_power`, or more for
    `min_looks` looks, at most `max_launches_per_arm` and at most what `[decide] trial_budget_s`
    affords at this launch cost (never under 2: one block has no spread of its own)."""
    block_s = 2.0 * (max(launch_s, 0.0) + max(measure_s, 0.0))
    afford = int(cfg.trial_budget_s // block_s) if block_s > 0 else cfg.max_launches_per_arm
    cap = max(2, min(cfg.max_launches_per_arm, afford))
    margin = math.log(1.0 + (cfg.keep_gain or 0.05)) - math.log(1.0 + cfg.min_gain)
    sd, df = pool.sd(), pool.df or pool.nu0

    def width(n: int) -> float:
        return block_half_width(sd, df, n, looks_planned(pool, n), cfg)

    fewest = next((n for n in range(2, cap + 1) if margin > 0 and width(n) <= margin), cap)
    n = min(cap, max(fewest, first_look(pool) + min_looks - 1))
    kept = math.exp(math.log(1.0 + cfg.min_gain) + width(n))
    if n > fewest:
        why = (
            f"{looks_planned(pool, n)} looks, so that an undecided look is followed by another while the "
            f"budget allows ({1.0 + (cfg.keep_gain or 0.05):.2f}x needs {fewest}); a trial stops at its first verdict"
        )
    elif afford < cfg.max_launches_per_arm and n == cap:
        why = f"bounded by [decide] trial_budget_s = {cfg.trial_budget_s:.0f} s at this launch cost"
    elif n == cap:
        why = f"bounded by [decide] max_launches_per_arm = {cfg.max_launches_per_arm}"
    else:
        why = f"enough for {1.0 + (cfg.keep_gain or 0.05):.2f}x"
    return BlockPlan(n, looks_planned(pool, n), block_s, kept, why, cfg.keep_power)


def measured_seconds(m: Measurement) -> float:
    """Seconds a launch's measurement took, from what it recorded (its windows' wall time, or its
    requests' times one after another) (pure)."""
    if m.windows:
        return sum(w.wall_s for w in m.windows)
    return sum(r.ttft_ms + sum(r.itl_ms) for r in m.requests) / 1000.0


def cost(state: LoopState, reference: Measurement | None = None) -> tuple[float, float]:
    """(seconds the running server's launch took, seconds the reference measurement took) (pure)."""
    launch_s = state.server.startup_s if state.server is not None else 0.0
    m = reference or state.reference
    return launch_s, measured_seconds(m) if m is not None else 0.0
