"""Cross-host arms' statistics (agent/decision/stats/crossover.py) on simulated launches of a two-host
crossover with a known launch SD and a known host bias: the estimate is unbiased where pooling
the hosts is not, the interval covers at its level, the plan of rounds and the looks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.decision.stats.crossover import (
    crossover_effect,
    crossover_look,
    first_look,
    looks_of,
    naive_shift,
    other,
    plan_line,
    rounds_planned,
    se_factor,
    session_arm,
    smallest_kept,
)
from agent.decision.stats.noise import across_hosts, launch_noise
from agent.decision.stats.replicates import launches_per_arm
from state.measurement.aa import AASample
from state.measurement.decision import DecisionConfig, LaunchNoise

BIAS = math.log(1.10)
"""The reference host runs 10% slower than the session's."""


def simulate(rng: np.random.Generator, rounds: int, sd: float, shift: float, bias: float = BIAS) -> dict:
    """`rounds` rounds of the crossover: host `s` runs the candidate in odd rounds, host `x` (slower
    by `bias`) the other arm; the reference tree's location 0, the candidate's -shift."""
    cells: dict = {}
    for r in range(1, rounds + 1):
        for host, arm in (("s", session_arm(r)), ("x", other(session_arm(r)))):
            mean = (0.0 if arm == "reference" else -shift) + (bias if host == "x" else 0.0)
            cells.setdefault((host, arm), []).append(float(rng.normal(mean, sd)))
    return cells


def test_the_rounds_swap_the_hosts_arms() -> None:
    assert [session_arm(r) for r in (1, 2, 3, 4)] == ["candidate", "reference", "candidate", "reference"]
    assert [other(session_arm(r)) for r in (1, 2)] == ["reference", "candidate"]


def test_a_host_bias_cancels_where_pooling_the_hosts_leaks_it() -> None:
    """A true 1.05x judged over 3 rounds with the reference host 10% slower: the crossover's mean
    estimate over 2000 simulated candidates is log 1.05 within its Monte Carlo error; pooling every
    launch of an arm (after 3 rounds the slow host holds 2 of the 3 reference launches) reads
    about a third of the bias as gain (1.05 x 1.10^(1/3) = 1.083x)."""
    rng, true = np.random.default_rng(7), math.log(1.05)
    cross, naive = [], []
    for _ in range(2000):
        cells = simulate(rng, 3, 0.02, true)
        est = crossover_effect(cells, 0.95)
        assert est is not None
        cross.append(est[0])
        naive.append(naive_shift(cells))
    assert abs(np.mean(cross) - true) < 0.002
    assert np.mean(naive) - true == pytest.approx(BIAS / 3, abs=0.002)


@pytest.mark.parametrize(("rounds", "sd"), [(3, 0.05), (4, 0.02), (6, 0.10)])
def test_the_interval_covers_a_no_op_at_its_level(rounds: int, sd: float) -> None:
    """95% intervals on simulated no-ops with the host bias cover 0 93-97% of the time."""
    rng = np.random.default_rng(rounds)
    hits = 0
    for _ in range(3000):
        est = crossover_effect(simulate(rng, rounds, sd, 0.0), 0.95)
        assert est is not None
        hits += est[1] <= 0.0 <= est[2]
    assert 0.93 <= hits / 3000 <= 0.97


def test_an_aa_prior_adds_degrees_of_freedom_and_keeps_coverage() -> None:
    """Two rounds hold one launch per cell (no df of their own): the estimate is the mean of the
    two hosts' differences, and only a stored A/A prior gives it an interval, which covers."""
    rng, sd, hits = np.random.default_rng(3), 0.03, 0
    for _ in range(2000):
        cells = simulate(rng, 2, sd, 0.0)
        d = [cells[(h, "reference")][0] - cells[(h, "candidate")][0] for h in ("s", "x")]
        alone = crossover_effect(cells, 0.95)
        assert alone is not None and alone[0] == pytest.approx(sum(d) / 2) and alone[4] == 0
        est = crossover_effect(cells, 0.95, prior=(sd, 10))
        assert est is not None and est[4] == 10
        hits += est[1] <= 0.0 <= est[2]
    assert 0.93 <= hits / 2000 <= 0.97


def test_a_host_missing_an_arm_is_not_estimated() -> None:
    rng = np.random.default_rng(1)
    assert crossover_effect(simulate(rng, 1, 0.02, 0.0), 0.95) is None
    lk, noise = crossover_look(simulate(rng, 1, 0.02, 0.0), DecisionConfig(), 1, 2)
    assert lk.verdict == "undecided" and noise.df == 0


def test_the_se_factor_is_alternating_arms_at_even_rounds() -> None:
    assert se_factor(1) == math.inf
    for r in (2, 4, 6):
        assert se_factor(r) == pytest.approx(math.sqrt(2.0 / r))
    assert se_factor(3) == pytest.approx(math.sqrt(2 * (1 / 2 + 1)) / 2)


def test_looks_start_once_there_are_degrees_of_freedom() -> None:
    assert (first_look(0), first_look(4)) == (3, 2)
    assert (looks_of(3, 0), looks_of(5, 0), looks_of(3, 6)) == (1, 3, 2)
    cfg = DecisionConfig(min_gain=0.02)
    rng = np.random.default_rng(5)
    lk, noise = crossover_look(simulate(rng, 3, 0.005, math.log(1.3)), cfg, 1, 1)
    assert lk.verdict == "accepted" and noise.df == 2 and noise.source == "replicates"
    assert (lk.requests_reference, lk.requests_candidate) == (3, 3)


def test_the_plan_grows_with_the_noise_stops_at_the_budget_and_keeps_a_true_gain() -> None:
    """The rounds planned for a 1.05x at 1% launch noise keep a true 1.05x, with a 10% host bias,
    about as often as `keep_power` asks (simulated sessions, looks after each round)."""
    cfg = DecisionConfig(max_launches_per_arm=12, keep_power=0.8, min_gain=0.0)
    quiet, loud = LaunchNoise(sigma_log=0.01), LaunchNoise(sigma_log=0.03)
    r = rounds_planned(quiet, cfg)
    assert 3 <= r < rounds_planned(loud, cfg) <= 12
    assert rounds_planned(LaunchNoise(sigma_log=0.5), cfg) == 12
    assert rounds_planned(quiet, DecisionConfig(max_launches_per_arm=2)) == 3  # one look needs 3
    # close to alternating arms' launches per arm for the same noise (the same SE at even rounds)
    assert abs(r - launches_per_arm(quiet, cfg)) <= 1
    assert smallest_kept(quiet, cfg, r) <= 1.05 < smallest_kept(quiet, cfg, r - 1)
    rng, kept = np.random.default_rng(11), 0
    of = looks_of(r, 0)
    for _ in range(1000):
        cells = simulate(rng, r, 0.01, math.log(1.05))
        for look, rounds in enumerate(range(first_look(0), r + 1), 1):
            sub = simulate_prefix(cells, rounds)
            lk, _ = crossover_look(sub, cfg, look, of)
            if lk.verdict != "undecided":
                break
        kept += lk.verdict == "accepted"
    assert 0.75 <= kept / 1000 <= 0.92
    assert "up to" in plan_line(quiet, cfg) and "rounds" in plan_line(quiet, cfg)


def simulate_prefix(cells: dict, rounds: int) -> dict:
    """The launches of the first `rounds` rounds (each cell fills one launch every other round)."""
    out = {}
    for (host, arm), xs in cells.items():
        first = 1 if (host == "s") == (arm == "candidate") else 2  # that cell's first round
        out[(host, arm)] = xs[: max(0, (rounds - first) // 2 + 1)]
    return out


def stored(
    key: str, locations: list[float], group: str = "tree", shift: float | None = None
) -> list[AASample]:
    """A host's A/A launches of one tree (or interleaved pairs, with `shift`)."""
    return [
        AASample(
            target_key=key, group=group, session_id="s", launch_number=i + 1,
            location_log=x, requests=6, shift_log=shift,
        )
        for i, x in enumerate(locations)
    ]  # fmt: skip


def test_both_hosts_launches_pool_without_the_host_offset() -> None:
    """The reference host's A/A launches count toward the launch noise of cross-host arms, each
    compared only with its own host's launches of the same tree: a host 20% slower adds degrees of
    freedom, not noise; pooled as one group, the offset would read as ~10% launch noise. Paired
    (interleaved) samples are not launch locations and are left out."""
    cfg = DecisionConfig()
    here = stored("t@local#1", [2.300, 2.310, 2.290])
    there = stored("t@local/x#1", [2.500, 2.512, 2.488, 2.506]) + stored("t@local/x#1", [0.0], shift=0.01)
    alone = launch_noise(here, cfg)
    assert alone.source == "default" and alone.sigma_log == cfg.default_launch_noise  # 3 launches
    both = across_hosts({"t@local#1": here, "t@local/x#1": there}, cfg)
    assert both.source == "aa" and both.launches == 7 and both.df == 5
    assert both.estimate_log is not None and 0.008 < both.estimate_log < 0.013
    naive = launch_noise(here + there[:4], cfg)  # the hosts not told apart
    assert naive.estimate_log is not None and naive.estimate_log > 0.09
