"""Values of the decision rule: launch noise from A/A launches, one look at the data, the verdict."""

from typing import Literal

from pydantic import Field

from state.base import Model
from state.measurement.arms import ArmsConfig, ArmsInUse, LaunchLocation
from state.measurement.correctness import OutputsArgs, OutputsResult  # noqa: F401  (moved: old checkpoints name them here)
from state.measurement.workload import OBJECTIVES

Verdict = Literal["accepted", "rejected", "regression", "inconclusive", "undecided"]
"""accepted: the whole CI lies above 1 + min gain; regression: the whole CI lies below 1;
rejected: the CI excludes any gain worth keeping (its upper end is below 1 + min gain);
inconclusive: the budget of looks is spent and none of those holds; undecided: looks remain."""


class DecisionConfig(ArmsConfig):
    """How a candidate is judged against the reference (the target file's `[decide]` table; the
    fields on how the arms are measured and sized are `ArmsConfig`'s)."""

    min_gain: float = Field(0.02, ge=0)
    """Smallest speedup worth keeping, as a fraction (0.02: the CI must lie above 1.02x)."""
    confidence: float = Field(0.95, gt=0.5, lt=1)
    """Simultaneous confidence of the intervals over all looks (Bonferroni: each look uses
    1 - (1 - confidence) / looks)."""
    looks: int = Field(3, ge=1, le=10)
    """Most looks at the candidate; each look adds `measure.repeats` requests per prompt on the
    same launch. The reference arm is measured with the full budget (looks x repeats) up front."""
    bootstrap: int = Field(2000, ge=200)
    """Bootstrap resamples per look."""
    default_launch_noise: float = Field(0.25, gt=0, lt=1)
    """Sequential arms: launch noise (SD of one launch's log TPOT) assumed until the A/A store
    holds `min_aa_launches` launches of this target on this host (A/A launches of the demo on a
    loaded 2-core machine: 14% SD); paired blocks: the prior worth `prior_df`. Interleaved arms
    use `default_pair_noise`."""
    prior_df: int = Field(1, ge=1, le=20)
    """Paired blocks: the degrees of freedom `default_launch_noise` counts for while no launch
    noise is measured (a prior, not a floor: agent/decision/stats/blocks.py)."""
    trial_budget_s: float = Field(1800.0, gt=0)
    """Paired blocks: the most seconds a trial's blocks may take at the launch and measurement
    cost the baseline showed (a 10-minute launch gets fewer blocks than a 5-second one)."""
    min_aa_launches: int = Field(6, ge=3)
    """A/A launches needed (at least two of one tree) before their estimate replaces the default."""
    default_pair_noise: float = Field(0.05, gt=0, lt=1)
    """Interleaved arms: launch noise (SD of one launch's log-TPOT effect) assumed until the A/A
    store holds `min_aa_pairs` pairs of this target on this host (the loaded 2-core demo machine:
    2.7% SD of an A/A pair's shift, 5 pairs, against 16% for two sequential launches)."""
    min_aa_pairs: int = Field(3, ge=2)
    """Interleaved A/A pairs needed before their estimate replaces `default_pair_noise`."""
    confirm_below: float | None = Field(2.0, gt=1)
    """Interleaved arms: an acceptance whose CI lower end is below this speedup is repeated on a
    fresh pair of launches and kept only when that pair accepts too (None: never): a few launches
    run 1.3-1.4x off for their whole life, also side by side (benchmarks/README.md)."""


class LaunchNoise(Model):
    """Launch-to-launch noise of a target on a host, from A/A launches (or the default)."""

    sigma_log: float
    """SD of one launch's log-TPOT location the rule uses (an A/A upper bound, or the default)."""
    estimate_log: float | None = None
    """The A/A point estimate (pooled SD over launches of the same tree), if there are any."""
    launches: int = 0
    """A/A launches the estimate pools."""
    source: Literal["default", "aa", "replicates", "pooled"] = "default"
    """`aa`: measured; `default`: too few A/A launches yet; `replicates`: alternating arms, the
    candidate's own replicate launches; `pooled`: paired blocks (agent/decision/stats/blocks.py)."""
    paired: bool = False
    """From interleaved A/A pairs (two launches measured together), for interleaved arms."""
    df: int = 0
    """Degrees of freedom of `estimate_log` (pooled within groups of the same tree)."""
    default_log: float | None = None
    """`default`: the configured default (below `sigma_log` when the few launches say worse)."""
    needed: int | None = None
    """`default`: the A/A launches (or pairs) that would replace it (`min_aa_launches`, `min_aa_pairs`)."""

    def describe(self) -> str:
        """e.g. `launch noise 2.1% (14 A/A launches)`, `... (the conservative default until 6 ...)`."""
        unit = "interleaved A/A pairs" if self.paired else "A/A launches"
        if self.source == "replicates":
            return f"between-launch SD {self.sigma_log:.1%} ({self.df} df, {self.launches} launches)"
        if self.source == "pooled":
            return f"launch noise {self.sigma_log:.1%} (pooled over {self.df} df)"
        if self.source == "aa":
            return f"launch noise {self.sigma_log:.1%} ({self.launches} {unit})"
        if self.default_log is not None and self.sigma_log > self.default_log:
            measured = f", measured {self.estimate_log:.1%}" if self.estimate_log is not None else ""
            return (
                f"launch noise {self.sigma_log:.1%} (the 90% upper bound of the {self.launches} {unit} so far"
                f"{measured}, above the {self.default_log:.1%} default)"
            )
        until = f" until {self.needed} {unit}" if self.needed is not None else ""
        if not self.launches:
            return f"launch noise {self.sigma_log:.1%} (the conservative default{until}; none yet)"
        measured = f", measured {self.estimate_log:.1%}" if self.estimate_log is not None else ""
        return (
            f"launch noise {self.sigma_log:.1%} (the conservative default{until}; {self.launches} so far"
            f"{measured}: too few to replace it)"
        )


class ArmStats(Model):
    """What one arm's requests looked like (warm-ups already discarded)."""

    tpot_ms_median: float
    """Median per-request TPOT."""
    itl_ms_p50: float
    """Median inter-token latency over all tokens."""
    itl_ms_p99: float
    """99th percentile inter-token latency over all tokens."""
    ttft_ms_median: float
    """Median time to first token."""
    requests: int
    """Requests measured."""
    warmups_discarded: int = 0
    """Warm-up requests sent on this launch and not counted."""
    outliers: int = 0
    """Requests whose log TPOT lies over 3 IQRs from their prompt's median (flagged, kept)."""
    windows: int | None = None
    """`[workload]`: windows measured (the rule's units of evidence); None: requests were."""
    concurrency: int | None = None
    """`[workload]`: requests in flight in each window."""
    output_tok_per_s: float | None = None
    """`[workload]`: output tokens per second over the windows' wall time."""
    requests_per_s: float | None = None
    """`[workload]`: requests completed per second over the windows' wall time."""
    goodput_tok_per_s: float | None = None
    """`[workload]` with `objective = "goodput"`: output tokens per second of the requests within
    its SLOs."""
    tpot_ms_p99: float | None = None
    """`[workload]`: 99th percentile of per-request TPOT."""
    ttft_ms_p99: float | None = None
    """`[workload]`: 99th percentile of TTFT."""


class Look(Model):
    """The rule applied once, after a batch of candidate requests."""

    look: int
    """1-based look number."""
    of: int
    """Most looks allowed."""
    speedup: float
    """exp(combined Hodges-Lehmann shift of log TPOT): reference TPOT / candidate TPOT."""
    ci_low: float
    """Lower end of the speedup CI at this look's level."""
    ci_high: float
    """Upper end of the speedup CI."""
    level: float
    """Per-look two-sided level (confidence / looks spent, Bonferroni)."""
    prompts: int
    """Prompts combined."""
    requests_reference: int
    """Requests per prompt in the reference arm (smallest over prompts)."""
    requests_candidate: int
    """Requests per prompt in the candidate arm (smallest over prompts)."""
    verdict: Verdict
    """What this look concluded."""
    machine_drift: float = 1.0
    """How much faster the host ran for one arm than the other (CPU probe ratio, >= 1); the CI is
    widened by it on both sides."""
    concurrency: int | None = None
    """`[workload]` with several levels: the (non-primary) level this look judged; None: the
    primary or only one."""


class Judgement(Model):
    """The rule's final answer on one candidate, with what it rests on."""

    verdict: Verdict
    """Final verdict (never `undecided`)."""
    looks: list[Look]
    """Every look taken, in order."""
    launch_noise: LaunchNoise
    """The launch noise the CI includes."""
    min_gain: float
    """Minimum gain the lower CI end had to clear."""
    confidence: float
    """Simultaneous confidence over all looks."""
    reference: ArmStats | None = None
    """The reference arm."""
    candidate: ArmStats | None = None
    """The candidate arm."""
    arms: ArmsInUse = "sequential"
    """How the arms were measured (see `DecisionConfig.arms`)."""
    per_launch: list[LaunchLocation] = []
    """Alternating arms: every launch's location, in launch order."""
    confirmation: list[Look] = []
    """Looks on the fresh pair of launches that confirmed (or not) an acceptance below
    `confirm_below`; empty when none was needed."""
    objective: str | None = None
    """`[workload]`: what the windows were judged on (e.g. `output_throughput`; the speedup is
    then that ratio, candidate over reference for a throughput); None: per-request TPOT."""
    levels: list[Look] = []
    """`[workload]` with several concurrency levels: the deciding look at each level but the
    primary (a regression at any is the verdict; agent/decision/stats/levels.py); empty otherwise."""

    @property
    def reference_host(self) -> str | None:
        """Cross-host arms: the reference host (the first launch's host other than the session's)."""
        hosts = [p.host for p in self.per_launch if p.host is not None]
        return hosts[1] if self.arms == "cross-host" and len(hosts) > 1 else None

    def arms_words(self) -> str:
        """`arms interleaved, `, `arms cross-host (reference host b), `; "" for sequential arms."""
        if self.arms == "sequential":
            return ""
        there = self.reference_host
        return f"arms {self.arms}" + (f" (reference host {there})" if there else "") + ", "

    @property
    def last(self) -> Look:
        """The look that decided."""
        return self.looks[-1]

    def line(self) -> str:
        """`TPOT 1.27x [1.19, 1.36] 95% CI, n = 3 prompts x 20 requests per arm, launch noise ...`."""
        lk = self.last
        n = (
            f"{lk.requests_candidate}"
            if lk.requests_candidate == lk.requests_reference
            else f"{lk.requests_reference}/{lk.requests_candidate}"
        )
        what, units = "TPOT", f"{lk.prompts} prompts x {n} requests"
        if self.objective is not None:
            what = OBJECTIVES[self.objective][0] if self.objective in OBJECTIVES else self.objective
            at = self.candidate.concurrency if self.candidate and self.candidate.concurrency else "?"
            units = f"{n} windows at concurrency {at}"
        if self.arms in ("alternating", "cross-host"):  # a look's `requests_*` count launches then
            units = f"{n} launches"
        if self.launch_noise.source == "pooled":  # paired blocks: they count blocks
            units = f"{n} paired launches"
        return (
            f"{what} {lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}] {self.confidence:.0%} CI, "
            f"n = {units} per arm, {self.launch_noise.describe()}, "
            f"{self.arms_words()}"
            f"look {lk.look}/{lk.of} -> {self.verdict}"
            + (
                f" (second pair of launches: {self.confirmation[-1].speedup:.2f}x "
                f"[{self.confirmation[-1].ci_low:.2f}, {self.confirmation[-1].ci_high:.2f}] "
                f"{self.confirmation[-1].verdict})"
                if self.confirmation
                else ""
            )
            + (
                f" (host ran {lk.machine_drift:.2f}x faster for one arm: CI widened by it)"
                if lk.machine_drift >= 1.05
                else ""
            )
            + "".join(
                f"; at concurrency {o.concurrency}: {o.speedup:.2f}x [{o.ci_low:.2f}, {o.ci_high:.2f}] "
                + ("regression" if o.verdict == "regression" else "no regression")
                for o in self.levels
            )
        )


class Prediction(Model):
    """What a diagnosis predicted a patch changes, recorded when the patch is accepted."""

    op: str
    """The evidence operator the patch should shrink."""
    dims: list[list[int]]
    """Its input dims."""
    op_us_per_step: float
    """Its self time per profiled step before the patch (us)."""
    step_us: float | None
    """The profiled step time before the patch (us), when the diagnosis recorded it."""
    expected_gain_share: float
    """Fraction of decode time the playbook's gain model says the patch removes."""


class MechanismCheck(Model):
    """Predicted vs realized, from the first profile after an accepted patch."""

    iteration: int
    """Iteration whose patch is checked."""
    playbook: str
    """Its playbook."""
    op: str
    """The operator predicted to shrink."""
    op_us_per_step_before: float
    """Its time per step before (us)."""
    op_us_per_step_after: float
    """Its time per step after (us; 0 when the group is gone)."""
    predicted_removed_us: float
    """Step time the gain model predicted removed (us per step)."""
    step_us_before: float | None
    """Profiled step time before (us)."""
    step_us_after: float
    """Profiled step time after (us)."""
    confirmed: bool
    """Whether the operator's reduction lies in the prediction's range (0.5x to 2x of it; sessions
    recorded before `LoopOptions.mechanism_range`: at least half of it)."""
    realized_over_predicted: float | None = None
    """The realized reduction over the predicted one (`mechanism_range` sessions); None before."""
    note: str
    """One line, e.g. `aten::copy_ 0.412 -> 0.000 ms/step (predicted -0.380); step 0.500 -> 0.090 ms:
    mechanism confirmed` (in us/step in sessions recorded before `LoopOptions.mechanism_ms`)."""
