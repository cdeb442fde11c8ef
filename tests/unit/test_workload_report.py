"""Under `[workload]` the summary's speedup and the report's figures are the workload objective's:
the objective before and after over all windows (its ratio the speedup, in the objective's
direction), TPOT p50/p99 at the concurrency, each arm's windows with their median and CI in a plot
of their own, and the summary table and the page saying so."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import render
from agent.cli.commands.sessions import not_compared
from agent.cli.target import load_target
from agent.decision.arms.measuring import beside_note, merge
from agent.report import plots
from agent.report.data import arms
from agent.sessions.summary import summarize
from state.config.options import LoopOptions
from state.door.records import ToolCallRecord
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import Decision, LoopState
from tests.unit.test_target import DEMO_TOML
from tests.unit.test_workload import windowed

W = WorkloadConfig(concurrency=4, requests=4, prompts=4)


def session(tmp_path: Path, w: WorkloadConfig | None, before: Measurement, after: Measurement) -> LoopState:
    target = load_target(DEMO_TOML).model_copy(update={"workload": w})
    return LoopState(
        session_id="s-serving",
        target=target,
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        baseline=before,
        reference=after,  # a kept candidate's, as only an accepted one replaces the baseline
        decisions=[Decision(iteration=1, source="p", verdict="accepted", reason="r")],
    )


def test_the_summary_speedup_is_the_objective_ratio_in_its_direction(tmp_path: Path) -> None:
    """Baseline windows at 100 tok/s with TPOT 50-51 ms, final at 150 tok/s with TPOT 40-41 ms:
    1.5x on output throughput (after / before); on TPOT p99 the ratio goes before / after."""
    before, after = windowed([100, 100], tpot_ms=50.0), windowed([150, 150], tpot_ms=40.0, label="b")
    s = summarize(session(tmp_path, W, before, after), "done")
    assert s.objective == "output throughput (tok/s)"
    assert (s.objective_before, s.objective_after) == pytest.approx((100.0, 150.0))
    assert s.speedup == pytest.approx(1.5)
    assert s.tpot_ms_before == pytest.approx(50.5) and s.tpot_ms_p99_before == pytest.approx(51.0)
    p99 = W.model_copy(update={"objective": "tpot_p99"})
    s99 = summarize(session(tmp_path, p99, before, after), "done")
    assert s99.objective == "TPOT p99 (ms)" and s99.speedup == pytest.approx(51.0 / 41.0)
    plain = summarize(session(tmp_path, None, before, after), "done")  # per-request TPOT as before
    assert plain.objective is None and plain.speedup == pytest.approx(50.5 / 40.5)
    out = io.StringIO()
    render.summary(Console(file=out, width=300, color_system=None), s)
    table = out.getvalue()
    assert (
        "output throughput (tok/s)" in table
        and "100.00 -> 150.00 (1.50x baseline -> final, not judged)" in table
    )
    assert "TPOT p99" in table and "51.0 ms -> 41.0 ms" in table


def record(seq: int, node: str, name: str, output: dict) -> ToolCallRecord:
    return ToolCallRecord(
        session_id="s", seq=seq, node=node, name=name, input={}, output=output, error=None,
        started_at=datetime.now(UTC), duration_s=0.1,
    )  # fmt: skip


def test_the_report_plots_each_arms_windows_on_the_objective() -> None:
    """Each arm holds its windows' objective (two looks' measurements of a candidate pooled), the
    median with a bootstrap CI inside the windows' range, TPOT p99; the plot draws them labelled
    in the objective's unit, and the TPOT plot marks the p99."""
    base = windowed([100, 104, 96])
    looks = [windowed([150, 148], tpot_ms=40.0, label="c"), windowed([152], tpot_ms=40.0, label="c")]
    calls = [record(0, "baseline", "bench.measure", {"measurement": base.model_dump(mode="json")})]
    calls.append(record(1, "relaunch", "server.launch", {}))
    calls += [
        record(2 + i, "measure", "bench.measure", {"measurement": m.model_dump(mode="json")})
        for i, m in enumerate(looks)
    ]
    d = Decision(iteration=1, source="search-1", verdict="accepted", reason="r", tpot_ms_after=40.5)
    ref, cand = arms(calls, [d], W)
    assert ref.objective == pytest.approx([100, 104, 96]) and cand.objective == pytest.approx([150, 148, 152])
    assert cand.objective_median == pytest.approx(150) and 148 <= cand.objective_ci[0] <= 150
    assert ref.tpot_p99_ms is not None and 51 < ref.tpot_p99_ms < 53  # window k's TPOT is 50 + k
    assert arms(calls, [d])[1].objective == []  # without a workload: TPOT only, as before
    svg = plots.objective_per_arm([ref, cand], "output throughput", "tok/s")
    assert "150.0 tok/s" in svg and "100.0 tok/s" in svg and "output throughput, tok/s" in svg
    assert "p99 " in plots.tpot_per_arm([ref, cand])


def test_bench_serving_beside_is_merged_over_looks_and_shown_not_judged(tmp_path: Path) -> None:
    """`use = "both"`: each look's measurement holds bench_serving's beside it; merged looks merge
    those too (windows numbered on), and the summary and its table show them next to perfloop's."""
    client = "sglang.bench_serving (sglang 0.5.9)"

    def both(rates: list[float], label: str) -> Measurement:
        beside = windowed([r * 0.9 for r in rates], label=label).model_copy(update={"client": client})
        return windowed(rates, label=label).model_copy(update={"beside": beside})

    merged = merge(both([100, 100], "a"), both([100], "a"))
    assert merged.beside is not None and [w.index for w in merged.beside.windows] == [0, 1, 2]
    assert beside_note(merged).startswith(f"; beside, {client}: at concurrency 4: 90.0 tok/s")
    assert beside_note(windowed([100])) == ""
    s = summarize(session(tmp_path, W, merged, both([150], "b")), "done")
    assert s.beside_before is not None and s.beside_before.startswith(
        f"{client}: at concurrency 4: 90.0 tok/s"
    )
    assert s.beside_after is not None and "135.0 tok/s" in s.beside_after
    assert s.measured_by == "perfloop" and s.speedup == pytest.approx(1.5)  # judged on perfloop's client
    out = io.StringIO()
    render.summary(Console(file=out, width=400, color_system=None), s)
    assert "beside (not judged)" in out.getvalue() and "135.0 tok/s" in out.getvalue()


def test_the_report_draws_bench_serving_beside_each_arm() -> None:
    """An arm whose launch bench_serving measured too holds that client's windows as its `beside`
    (both looks' pooled); the objective and TPOT plots draw it next to perfloop's, labelled."""
    client = "sglang.bench_serving (sglang 0.5.9)"

    def both(rates: list[float], label: str) -> Measurement:
        beside = windowed([r * 0.9 for r in rates], tpot_ms=60.0, label=label).model_copy(
            update={"client": client}
        )
        return windowed(rates, label=label).model_copy(update={"beside": beside})

    calls = [
        record(0, "baseline", "bench.measure", {"measurement": both([100, 100], "a").model_dump(mode="json")})
    ]
    calls += [
        record(1, "baseline", "bench.measure", {"measurement": both([100], "a").model_dump(mode="json")})
    ]
    (arm,) = arms(calls, [], W)
    assert arm.beside is not None and arm.beside.label == client
    assert arm.beside.objective == pytest.approx([90, 90, 90]) and arm.objective == pytest.approx(
        [100, 100, 100]
    )
    assert "bench_serving 90.0 tok/s" in plots.objective_per_arm([arm], "output throughput", "tok/s")
    assert "bench_serving 60.0 ms" in plots.tpot_per_arm([arm])


def test_a_workload_session_recorded_before_the_objective_speedup_still_replays_the_same(
    tmp_path: Path,
) -> None:
    """A summary recorded before `speedup` was the objective's (its TPOT ratio, no `objective`)
    is compared without those fields, so its replay matches; one recorded since is compared whole."""
    before, after = windowed([100, 100], tpot_ms=50.0), windowed([150, 150], tpot_ms=40.0, label="b")
    now = summarize(session(tmp_path, W, before, after), "done")
    old = now.model_copy(
        update={"speedup": 50.5 / 40.5, "objective": None, "objective_before": None, "objective_after": None,
                "tpot_ms_p99_before": None, "tpot_ms_p99_after": None}
    )  # fmt: skip
    skip = not_compared(old)
    assert old.model_dump(exclude=skip) == now.model_dump(exclude=skip) and "speedup" in skip
    assert "speedup" not in not_compared(now) and old.model_dump() != now.model_dump()
    plain = summarize(session(tmp_path, None, before, after), "done")
    assert "speedup" not in not_compared(plain)  # no workload: its speedup always was TPOT's
