"""Launch-to-launch noise from A/A launches (the same tree launched again), as pure functions.

Every baseline launch is an A/A sample: its location (mean over prompts of the median log TPOT)
varies from launch to launch of the same tree by the launch noise plus the sampling error of the
location. The pooled SD within groups of the same tree and workload counts both (conservative);
the rule uses an upper 90% confidence bound of it (chi-square with the pooled degrees of
freedom), and a conservative default until there are `min_aa_launches` launches (or that bound,
when the first few launches already disagree by more than the default allows).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from statistics import NormalDist

from state.config.target import TargetConfig, TrialHost
from state.measurement.aa import AASample
from state.measurement.decision import DecisionConfig, LaunchNoise

UPPER_BOUND = 0.90
"""Confidence of the upper bound on the launch SD that the rule uses."""


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def target_key(target: TargetConfig, on: TrialHost | None = None) -> str:
    """Which target on which host: name, host and launch command (not the repo path, which a demo
    session makes anew) and the `[workload]` if any, e.g. `mla_server demo (CPU preset)@local#1a2b...`;
    `on`: on that `[[hosts]]` host instead (its name too: several GPUs of one machine are hosts)."""
    where = on.host if on is not None else target.host
    host = where.url if where.kind == "ssh" else "local"
    if on is not None:
        host = f"{host}/{on.name}"
    launch = {"argv": target.launch.argv, "env": target.launch.env}
    parts: list = [host, launch]
    if target.workload is not None:  # its windows' noise is another quantity's than a request's
        parts.append(target.workload.model_dump(mode="json"))
    return f"{target.name}@{host}#{_digest(parts)}"


def outputs_key(target: TargetConfig) -> str:
    """Which engine on which host serving which model: the baselines' output noise is published
    per key (whatever the launch flags and workload: the batch that moves the texts is the
    correctness set's), e.g. `outputs:mla_server@local#1a2b...`."""
    host = target.host.url if target.host.kind == "ssh" else "local"
    return f"outputs:{target.kind}@{host}#{_digest([target.model])}"


def shape_key(target: TargetConfig) -> str:
    """Which engine on which host at which workload shape, whatever its launch flags: paired blocks'
    history is pooled under it, so every trial of a launch-option search (and every later session
    of that shape) adds to one estimate, e.g. `blocks:mla_server@local#1a2b...`."""
    host = target.host.url if target.host.kind == "ssh" else "local"
    m = target.measure
    shape: list = [m.max_tokens, len(m.prompts), m.warmup_requests]
    if target.workload is not None:
        shape = [target.workload.model_dump(mode="json")]
    return f"blocks:{target.kind}@{host}#{_digest(shape)}"


def sample_group(content_sha256: str, target: TargetConfig, client: str) -> str:
    """Launches comparable as A/A: same tree content, same workload, same client."""
    m = target.measure
    return _digest([content_sha256, m.prompts, m.max_tokens, m.warmup_requests, client])


def session_group(session_id: str, content_sha256: str, target: TargetConfig, client: str) -> str:
    """Launches of one tree in one session (alternating arms' replicates): compared only with each
    other, never with the same tree's launches in another session."""
    return _digest([session_id, sample_group(content_sha256, target, client)])


def chi2_quantile(p: float, df: float) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (good to ~1% for df >= 2)."""
    z = NormalDist().inv_cdf(p)
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def pooled_sd(samples: Sequence[AASample]) -> tuple[float, int]:
    """(pooled within-group SD of locations, degrees of freedom); (0, 0) with no repeated group."""
    groups: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s.location_log)
    ss, df = 0.0, 0
    for locs in groups.values():
        if len(locs) >= 2:
            mean = sum(locs) / len(locs)
            ss += sum((x - mean) ** 2 for x in locs)
            df += len(locs) - 1
    return (math.sqrt(ss / df), df) if df else (0.0, 0)


def launch_noise(samples: Sequence[AASample], cfg: DecisionConfig) -> LaunchNoise:
    """The launch noise the rule uses: an upper bound of the A/A estimate, or the default."""
    sd, df = pooled_sd(samples)
    launches = len(samples)
    upper = sd * math.sqrt(df / chi2_quantile(1.0 - UPPER_BOUND, df)) if df else 0.0
    if launches < cfg.min_aa_launches or df < 2:  # the default, unless the few launches say worse
        return LaunchNoise(
            sigma_log=max(cfg.default_launch_noise, upper),
            estimate_log=sd if df else None,
            launches=launches,
            df=df,
            default_log=cfg.default_launch_noise,
            needed=cfg.min_aa_launches,
        )
    return LaunchNoise(sigma_log=max(upper, 0.005), estimate_log=sd, launches=launches, source="aa", df=df)


def across_hosts(stored: Mapping[str, Sequence[AASample]], cfg: DecisionConfig) -> LaunchNoise:
    """The launch noise of hosts of one kind from each one's A/A launches (`stored` by
    `target_key`): a launch is compared only with its own host's launches of its group, so what
    one host runs faster than the other is not counted as launch noise (pure)."""
    samples = [
        s.model_copy(update={"group": f"{key}|{s.group}"})
        for key, ss in stored.items()
        for s in ss
        if s.shift_log is None
    ]
    return launch_noise(samples, cfg)


def pair_noise(samples: Sequence[AASample], cfg: DecisionConfig) -> LaunchNoise:
    """The launch noise for interleaved arms, from interleaved A/A pairs (two launches of one tree
    measured together): each pair's shift has variance 2 sigma^2 and mean 0, so sigma^2 is
    estimated by sum(shift^2) / (2 n) with n degrees of freedom; the rule uses its upper 90%
    bound once there are `min_aa_pairs` pairs, and until then the larger of the default and the
    point estimate. Single launches (sequential A/A samples) do not count here: their spread
    holds the machine's drift between launches, which interleaving removes. Pairs that share one
    launch (the baseline server beside each of the session's first A/A launches, `aa_pairs`) are
    correlated: they count with `shared_df` degrees of freedom."""
    shifts = [s.shift_log for s in samples if s.shift_log is not None]
    n = len(shifts)
    sd = math.sqrt(sum(x * x for x in shifts) / (2 * n)) if n else None
    if n < cfg.min_aa_pairs or sd is None:
        return LaunchNoise(
            sigma_log=max(cfg.default_pair_noise, sd or 0.0),
            estimate_log=sd,
            launches=n,
            paired=True,
            default_log=cfg.default_pair_noise,
            needed=cfg.min_aa_pairs,
        )
    df = pair_df(samples)
    upper = sd * math.sqrt(df / chi2_quantile(1.0 - UPPER_BOUND, df))
    return LaunchNoise(sigma_log=max(upper, 0.005), estimate_log=sd, launches=n, source="aa", paired=True)


def shared_df(m: int) -> float:
    """Degrees of freedom of sum(shift^2) over `m` A/A pairs that share one side (Satterthwaite:
    the shifts' covariance is sigma^2 (I + J), so 2 E^2 / Var = 4 m / (m + 3); 1 for one pair)."""
    return 4.0 * m / (m + 3.0)


def pair_df(samples: Sequence[AASample]) -> float:
    """Degrees of freedom of the pooled pair estimate: pairs grouped by the launch they share (pure)."""
    sides: dict[tuple[str, int], int] = defaultdict(int)
    for s in samples:
        if s.shift_log is not None:
            sides[(s.session_id, s.beside if s.beside is not None else s.launch_number)] += 1
    return sum(shared_df(m) for m in sides.values())


def noise_for(samples: Sequence[AASample], cfg: DecisionConfig, arms: str | None = None) -> LaunchNoise:
    """The launch noise the configured arms (or `arms`, `auto` resolved) need (pure)."""
    if (arms or cfg.arms) == "interleaved":
        return pair_noise(samples, cfg)
    return launch_noise([s for s in samples if s.shift_log is None], cfg)


def session_line(baseline: LaunchNoise | None, used: Sequence[LaunchNoise]) -> str | None:
    """The launch-noise line of a session's summary: the noise its decisions used (`used`, each
    judged decision's in order), then the baseline's where it differs; the baseline's alone before
    any decision; None with neither (pure). A paired-blocks search's trials pool noise the baseline
    never held (1.5% over their blocks' df beside the baseline's 25% default): the baseline's line
    alone told of a noise no decision used."""
    if not used:
        return baseline.describe() if baseline is not None else None
    last = used[-1].describe()
    line = f"the decisions used {last}"
    if len(used) > 1 and (first := used[0].describe()) != last:
        line += f" at the last of {len(used)} (the first: {first.removeprefix('launch noise ')})"
    if baseline is not None and baseline.describe() != last:
        line += f"; at the baseline: {baseline.describe().removeprefix('launch noise ')}"
    return line
