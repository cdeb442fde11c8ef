"""A measurement whose streams lost their timing is topped up on its launch (CI, 2026-12-05: a
15x faster candidate on a loaded 2-core machine kept 1 timed request of 3 per prompt, the rule had
no spread, and an exact 15x fix ended inconclusive at [0, 1e9])."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent.decision.arms import measuring
from state.measurement.measure import RequestRecord
from tools.client.stats import summarize


def record(prompt: int, timed: bool) -> RequestRecord:
    """A 12-token stream: decode gaps of 2 ms, or the burst a descheduled client reads (10 us)."""
    gap = 2.0 if timed else 0.01
    return RequestRecord(prompt_index=prompt, ttft_ms=5.0, itl_ms=[gap] * 11, text=f"t{prompt}", completion_tokens=12)


def measured(*timed_per_prompt: tuple[bool, ...]):
    rs = [record(p, t) for p, ts in enumerate(timed_per_prompt) for t in ts]
    return summarize("cand", "sha", rs, len(timed_per_prompt), 1.0)


def test_untimed_prompts_counts_prompts_short_of_two_timed_streams() -> None:
    assert measuring.untimed_prompts(measured((True, True, True), (True, True, False)), 3) == 0
    assert measuring.untimed_prompts(measured((True, False, False), (True, True, True)), 3) == 1
    assert measuring.untimed_prompts(measured((False, False, False), (True, False, False)), 3) == 2
    assert measuring.untimed_prompts(measured((True,), (False,)), 1) == 1  # one repeat: one timing


@pytest.mark.parametrize("workload", [None, object()])
def test_a_burst_read_measurement_is_topped_up_at_most_twice_and_never_under_a_workload(
    monkeypatch: pytest.MonkeyPatch, workload: object
) -> None:
    batches = iter([measured((True, False, False), (True, True, True)), measured((False, False, False), (True, True, True)),
                    measured((True, True, False), (True, True, True)), measured((True, True, True), (True, True, True))])
    calls: list[tuple[int, bool]] = []

    def once(state, runtime, label, repeats, warm_up):
        calls.append((repeats, warm_up))
        return next(batches)

    monkeypatch.setattr(measuring, "measure_once", once)
    state = SimpleNamespace(target=SimpleNamespace(workload=workload))
    m = measuring.measure_arm(state, None, "cand", 3, warm_up=True)  # type: ignore[arg-type]
    if workload is not None:  # windows are the unit there, not streams: measured as asked
        assert calls == [(3, True)] and len(m.requests) == 6
        return
    # 1 timed of 3 on prompt 0, still 1 after the first top-up, 3 after the second: the limit
    assert calls == [(3, True), (3, False), (3, False)]
    assert len(m.requests) == 18 and measuring.untimed_prompts(m, 3) == 0


def test_a_measurement_with_its_timings_is_not_topped_up(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def once(state, runtime, label, repeats, warm_up):
        calls.append(repeats)
        return measured((True, True, False), (True, True, True))

    monkeypatch.setattr(measuring, "measure_once", once)
    m = measuring.measure_arm(SimpleNamespace(target=SimpleNamespace(workload=None)), None, "c", 3, True)  # type: ignore[arg-type]
    assert calls == [3] and len(m.requests) == 6
