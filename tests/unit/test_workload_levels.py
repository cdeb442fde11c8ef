"""Several concurrency levels in one `[workload]` (`concurrency = [8, 1]`): the table as written,
the rule on the primary level only, the other levels' looks (Bonferroni over them) and a
regression at any of them as the verdict, and the per-level serving notes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.decision.arms.measuring import judgement_of, serving_note, warmup_requests
from agent.decision.stats.levels import at_level, level_looks, with_levels
from agent.decision.stats.rule import arm_of, look
from agent.proposer.tuning.search import _objective
from agent.report import plots
from agent.report.data import arms
from state.measurement.decision import DecisionConfig, LaunchNoise
from state.measurement.measure import Measurement, RequestRecord, Window
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import Decision
from tests.unit.test_workload import TARGET
from tests.unit.test_workload_report import record
from tools.client.stats import summarize
from tools.errors import ConfigError

W = WorkloadConfig(concurrency=[8, 1], requests=4, prompts=4)
NOISE = LaunchNoise(sigma_log=0.01)


def two_levels(at8: list[float], at1: list[float], label: str = "a") -> Measurement:
    """Windows numbered as the client numbers them (repeat k, level j: 2k + j), one per tok/s value
    at each level, 4 requests of 10 tokens each; TPOT 20 ms at 8, 10 ms at 1."""
    records, windows = [], []
    for k, (fast, slow) in enumerate(zip(at8, at1, strict=True)):
        for j, (c, rate) in enumerate(((8, fast), (1, slow))):
            index = 2 * k + j
            windows.append(Window(index=index, concurrency=c, requests=4, output_tokens=40, wall_s=40 / rate))
            records += [
                RequestRecord(prompt_index=i, ttft_ms=50.0, itl_ms=[20.0 if c == 8 else 10.0] * 9,
                              text=f"t{i}", completion_tokens=10, window=index)
                for i in range(4)
            ]  # fmt: skip
    return summarize(label, "t", records, 4, sum(w.wall_s for w in windows), windows)


def test_a_list_of_levels_loads_the_first_primary_and_bad_lists_are_one_line(tmp_path: Path) -> None:
    base = TARGET.read_text()
    path = tmp_path / "t.toml"
    path.write_text(f"{base}\n[workload]\nconcurrency = [8, 1]\nrequests = 16\n")
    w = load_target(path).workload
    assert w is not None and (w.levels, w.primary, w.at(1).levels) == ([8, 1], 8, [1])
    assert w.describe().startswith("concurrency 8 (also 1: a regression there rejects), 16 requests")
    assert warmup_requests(w) == 2 * 16  # one warm-up window at each level
    assert WorkloadConfig(concurrency=4, requests=8).levels == [4]  # a scalar as before
    for bad, message in (
        ("[8, 8]", "needs distinct levels"),
        ("[]", "needs distinct levels"),
        ("[8, 0]", "each level must be in 1..1024"),
    ):
        path.write_text(f"{base}\n[workload]\nconcurrency = {bad}\nrequests = 16\n")
        with pytest.raises(ConfigError) as err:
            load_target(path)
        assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_rule_judges_the_primary_and_a_regression_elsewhere_rejects() -> None:
    """The candidate is 1.5x at concurrency 8; at concurrency 1 it is 0.7x (a regression beyond
    its CI) or the same: the primary's look accepts either way, the other level decides."""
    cfg = DecisionConfig(looks=1)
    ref = two_levels([100, 102, 98, 101, 99, 100], [50, 51, 49, 50, 50, 51])
    worse = two_levels([150, 152, 149, 151, 148, 150], [35, 36, 34, 35, 35, 36], "c")
    same = two_levels([150, 152, 149, 151, 148, 150], [50, 50, 51, 49, 50, 51], "c")
    (primary,) = arm_of(ref, 4, W)
    assert len(primary) == 6 and primary[0] == pytest.approx(-math.log(100.0))  # level 8 only
    for cand, expected in ((worse, "regression"), (same, "accepted")):
        lk = look(arm_of(ref, 4, W), arm_of(cand, 4, W), NOISE, cfg, 1)
        assert lk.verdict == "accepted" and 1.45 < lk.speedup < 1.55
        (other,) = level_looks(ref, cand, W, NOISE, cfg, 1)
        assert other.concurrency == 1 and other.level == pytest.approx(lk.level)  # one other level
        assert with_levels(lk.verdict, [other]) == expected, other
        j = judgement_of(with_levels(lk.verdict, [other]), [lk], NOISE, cfg, (ref, cand), 4, workload=W,
                         levels=[other])  # fmt: skip
        assert j.candidate is not None and j.candidate.concurrency == 8 and j.candidate.windows == 6
        tail = "regression" if expected == "regression" else "no regression"  # never the other's "accepted"
        at1 = f"; at concurrency 1: {other.speedup:.2f}x [{other.ci_low:.2f}, {other.ci_high:.2f}] {tail}"
        assert j.line().endswith(at1), j.line()
    assert 0.65 < level_looks(ref, worse, W, NOISE, cfg, 1)[0].speedup < 0.75
    three = W.model_copy(update={"concurrency": [8, 1, 4]})  # two other levels: each at half the alpha
    lv1, lv4 = level_looks(ref, same, three, NOISE, cfg, 1)
    assert (lv1.level, lv4.level) == pytest.approx((0.975, 0.975)) and lv1.concurrency == 1
    assert lv4.verdict == "inconclusive" and lv4.ci_high > 1e8  # no window at 4: never decided on
    assert level_looks(ref, ref, W.at(8), NOISE, cfg, 1) == []  # one level: nothing more


def test_each_level_has_its_serving_note_and_its_own_windows() -> None:
    m = two_levels([100, 100], [50, 50])
    one = at_level(m, 1)
    assert [w.index for w in one.windows] == [1, 3] and {r.window for r in one.requests} == {1, 3}
    note = serving_note(m)
    assert note.startswith("; at concurrency 8: 100.0 tok/s") and "; at concurrency 1: 50.0 tok/s" in note
    assert "TPOT p50/p99 20.0/20.0 ms" in note and "TPOT p50/p99 10.0/10.0 ms" in note


def test_the_search_counts_a_regression_at_another_level_as_a_failed_trial() -> None:
    """TPE sees the primary's objective; a trial that regressed at another level is a FAIL (None),
    so the optimizer does not model it as good; one that did not keeps its value."""
    cfg = DecisionConfig(looks=1)
    ref = two_levels([100, 102, 98, 101, 99, 100], [50, 51, 49, 50, 50, 51])
    worse = two_levels([150, 152, 149, 151, 148, 150], [35, 36, 34, 35, 35, 36], "c")
    lk = look(arm_of(ref, 4, W), arm_of(worse, 4, W), NOISE, cfg, 1)
    others = level_looks(ref, worse, W, NOISE, cfg, 1)
    j = judgement_of(
        with_levels(lk.verdict, others), [lk], NOISE, cfg, (ref, worse), 4, workload=W, levels=others
    )
    d = Decision(iteration=1, source="search-1", verdict=j.verdict, reason="r", tpot_ms_after=20.0,
                 outputs_identical=True, judgement=j)  # fmt: skip
    assert j.verdict == "regression" and _objective(d, W) is None
    kept = d.model_copy(update={"judgement": j.model_copy(update={"levels": []}), "verdict": "accepted"})
    assert _objective(kept, W) == pytest.approx(-math.log(150.0), abs=0.01)


def test_the_report_holds_and_draws_every_level() -> None:
    """An arm's own figures are the primary's; each other level's (bench_serving's beside too)
    are in `levels`; the per-level plot draws each level, the primary marked as judged."""
    m = two_levels([100, 102], [50, 51]).model_copy(update={"beside": two_levels([90, 92], [45, 46])})
    calls = [record(0, "baseline", "bench.measure", {"measurement": m.model_dump(mode="json")})]
    (arm,) = arms(calls, [], W)
    assert arm.objective == pytest.approx([100, 102]) and sorted(arm.levels) == [1]
    assert arm.levels[1].objective == pytest.approx([50, 51]) and arm.median_ms == pytest.approx(20.0)
    assert arm.beside is not None and arm.beside.objective == pytest.approx([90, 92])
    at1 = arm.levels[1].beside
    assert at1 is not None and at1.objective == pytest.approx([45, 46])
    svg = plots.objective_by_level([arm], "output throughput", "tok/s", 8)
    assert "concurrency 8 (judged)" in svg and "concurrency 1" in svg
