"""Published calibration, as pure functions (beside `perfloop calibrate`, which prints them): how often the rule calls A/A evidence different, and
the smallest gain it keeps on this host with this budget (`perfloop calibrate`, a paired-blocks
session's baseline note).

Leave-one-out: each A/A comparison (two single launches of one tree in turn, or one interleaved
pair) is judged as the rule would judge a one-block trial, with the launch noise of every other
A/A sample (pooled within groups, its df and t quantile); a comparison whose interval at
`confidence` excludes no change is a false call. Over many comparisons the share should be near
the nominal 1 - confidence; well above it, the noise the rule uses is too small for this host.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from agent.decision.stats.blocks import plan_blocks, pool_of
from agent.decision.stats.noise import pooled_sd
from agent.decision.stats.power import keeps
from agent.decision.stats.replicates import t_quantile
from state.measurement.aa import AASample
from state.measurement.decision import DecisionConfig, LaunchNoise


@dataclass(frozen=True)
class Published:
    """What calibration publishes."""

    called: int
    """A/A comparisons the rule called different."""
    comparisons: int
    """A/A comparisons judged (each with the others' noise)."""
    nominal: float
    """The rule's nominal rate of false calls (1 - confidence)."""
    detectable: float
    """The smallest true speedup kept with `keep_power` with this noise and budget."""
    power: float
    """`keep_power`."""

    def line(self) -> str:
        """`false calls: 1 of 12 A/A comparisons (8%; nominal 5%); smallest gain kept with 80% power 1.06x`."""
        rate = f"{self.called / self.comparisons:.0%}" if self.comparisons else "none judged yet"
        return (
            f"false calls: {self.called} of {self.comparisons} A/A comparisons called different "
            f"({rate}; nominal {self.nominal:.0%}), each judged with the others' noise; smallest gain "
            f"kept with {self.power:.0%} power {self.detectable:.2f}x"
        )

    def as_json(self) -> dict:
        """Its fields for `--json`."""
        return {
            "false_calls": self.called,
            "aa_comparisons": self.comparisons,
            "false_call_rate": self.called / self.comparisons if self.comparisons else None,
            "nominal_rate": self.nominal,
            "smallest_gain_kept": self.detectable,
            "power": self.power,
        }


def _launch_pairs(samples: Sequence[AASample]) -> list[tuple[AASample, AASample]]:
    """Consecutive single launches of one group, two by two (pure)."""
    groups: dict[str, list[AASample]] = defaultdict(list)
    for s in samples:
        if s.shift_log is None:
            groups[s.group].append(s)
    return [(g[i], g[i + 1]) for g in groups.values() for i in range(0, len(g) - 1, 2)]


def _called(d: float, sd: float, df: float, cfg: DecisionConfig) -> bool:
    """Whether a one-block comparison of difference `d` is called different (pure)."""
    half = t_quantile(0.5 + cfg.confidence / 2.0, max(int(df), 1)) * math.sqrt(2.0) * sd
    return abs(d) > half


def aa_calls(samples: Sequence[AASample], cfg: DecisionConfig) -> tuple[int, int]:
    """(called different, comparisons) over the A/A evidence, leave one out (pure)."""
    called = judged = 0
    for a, b in _launch_pairs(samples):
        sd, df = pooled_sd([s for s in samples if s is not a and s is not b and s.shift_log is None])
        if df:
            judged += 1
            called += _called(a.location_log - b.location_log, sd, df, cfg)
    shifts = [s.shift_log for s in samples if s.shift_log is not None]
    for i, x in enumerate(shifts):
        rest = shifts[:i] + shifts[i + 1 :]
        if rest:
            judged += 1
            called += _called(x, math.sqrt(sum(r * r for r in rest) / (2 * len(rest))), len(rest), cfg)
    return called, judged


def published(samples: Sequence[AASample], noise: LaunchNoise, cfg: DecisionConfig, arms: str) -> Published:
    """The rule's false calls on the A/A evidence, and the smallest gain it keeps: paired blocks'
    plan for alternating arms, else one launch per arm with unlimited requests (pure)."""
    called, judged = aa_calls(samples, cfg)
    if arms == "alternating":
        detectable = plan_blocks(pool_of([], noise, cfg), cfg, 0.0, 0.0).kept
    else:
        detectable = keeps(noise.sigma_log, 0.0, 1, math.inf, cfg.looks, cfg)
    return Published(called, judged, 1.0 - cfg.confidence, detectable, cfg.keep_power)
