"""Published calibration (agent.decision.calibration.published.py): the rule's false calls on A/A
evidence, each comparison judged with the others' noise, and the smallest gain kept."""

from __future__ import annotations

import numpy as np

from agent.decision.calibration.published import aa_calls, published
from state.measurement.aa import AASample
from state.measurement.decision import DecisionConfig, LaunchNoise

CFG = DecisionConfig()


def launches(locs: list[float], group: str = "g") -> list[AASample]:
    return [
        AASample(target_key="t", group=group, session_id="s", launch_number=i, location_log=x, requests=6)
        for i, x in enumerate(locs)
    ]


def test_a_well_described_host_is_called_different_about_as_often_as_nominal() -> None:
    rng = np.random.default_rng(3)
    samples = launches([float(x) for x in rng.normal(4.0, 0.02, 400)])
    called, judged = aa_calls(samples, CFG)
    assert judged == 200 and called / judged <= 0.08, called  # nominal 5%


def test_a_pair_far_outside_the_others_noise_is_a_false_call() -> None:
    quiet = [4.0, 4.001, 3.999, 4.0, 4.002, 3.998, 4.0, 4.001]
    called, judged = aa_calls(launches([*quiet, 4.0, 4.3]), CFG)
    assert judged == 5 and called >= 1


def test_interleaved_pairs_are_judged_by_their_shifts() -> None:
    pairs = [
        AASample(target_key="t", group="g", session_id=f"s{i}", launch_number=1, location_log=0.0,
                 requests=0, shift_log=x)
        for i, x in enumerate([0.01, -0.012, 0.008, -0.01, 0.3])
    ]  # fmt: skip
    called, judged = aa_calls(pairs, CFG)
    assert judged == 5 and called == 1  # the 0.3 shift against the others' ~1%


def test_the_published_line_gives_the_rate_against_nominal_and_the_smallest_gain_kept() -> None:
    noise = LaunchNoise(sigma_log=0.02, estimate_log=0.02, df=10, source="aa")
    p = published(launches([4.0, 4.01, 3.99, 4.0]), noise, CFG, "alternating")
    assert p.comparisons == 2 and abs(p.nominal - 0.05) < 1e-9 and 1.02 < p.detectable < 1.2
    assert p.line().startswith(f"false calls: {p.called} of 2 A/A comparisons called different")
    assert "nominal 5%" in p.line() and f"power {p.detectable:.2f}x" in p.line()
    assert p.as_json()["aa_comparisons"] == 2
    seq = published([], noise, CFG, "sequential")
    assert seq.comparisons == 0 and "none judged yet" in seq.line() and seq.detectable > p.detectable
