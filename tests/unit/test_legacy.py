"""agent/decision/rules/legacy.py: the legacy `iqr-v0` acceptance rule (recordings made with it replay
with it; new sessions use `ci-v1`, tests/unit/test_decision_rule.py)."""

from __future__ import annotations

from agent.decision.rules.legacy import judge
from state.measurement.measure import Measurement, RequestRecord
from tools.client.stats import summarize


def measurement(tpots: list[float], texts: list[str], label: str = "m") -> Measurement:
    records = [
        RequestRecord(
            prompt_index=i % len(texts),
            ttft_ms=50.0,
            itl_ms=[t, t, t],
            text=texts[i % len(texts)],
            completion_tokens=4,
        )
        for i, t in enumerate(tpots)
    ]
    return summarize(label, "tree", records, len(texts), wall_s=1.0)


def test_judge_accepts_a_clear_win_with_identical_outputs() -> None:
    ok, reason, noise = judge(
        measurement([100, 101, 99, 100], ["a", "b"]), measurement([30, 31, 29, 30], ["a", "b"])
    )
    assert ok and "3.33x" in reason and 0 < noise < 2


def test_judge_rejects_changed_outputs_even_when_faster() -> None:
    ok, reason, _ = judge(measurement([100, 100], ["a", "b"]), measurement([10, 10], ["a", "X"]))
    assert not ok and reason.startswith("outputs changed for 1/2")


def test_judge_rejects_a_gain_within_noise() -> None:
    ok, reason, noise = judge(measurement([100, 80, 120, 100], ["a"]), measurement([95, 75, 115, 95], ["a"]))
    assert not ok and "within the measured noise" in reason and noise >= 10


def test_judge_names_a_regression() -> None:
    ok, reason, _ = judge(measurement([100, 101, 99, 100], ["a"]), measurement([150, 151, 149, 150], ["a"]))
    assert not ok and reason.startswith("TPOT got worse: 100.0 -> 150.0 ms")
