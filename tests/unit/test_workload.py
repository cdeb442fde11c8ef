"""`[workload]`, its pure parts: the config's one-line refusals, the seeded prompts, the window as
the rule's unit of evidence on each objective, looks merged on one launch, bench_serving's one
range ratio, and the search's objective under a workload."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.decision.arms.measuring import merge, serving_note
from agent.decision.stats.rule import arm_of, arm_stats, look, window_cost
from agent.proposer.tuning.search import _objective
from state.measurement.decision import ArmStats, DecisionConfig, Judgement, LaunchNoise
from state.measurement.measure import Measurement, RequestRecord, Stat, Window
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import Decision
from tools.client.stats import summarize
from tools.client.windows import arrivals, workload_prompts
from tools.errors import ConfigError
from tools.sglang.bench import bench_range_ratio

TARGET = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def test_bad_workload_is_one_clear_line(tmp_path: Path) -> None:
    """What `perfloop run` says of a bad `[workload]`: one line naming the table and the fix."""
    cases = [
        ("concurrency = 4", "needs requests (per window) or duration_s"),
        ("concurrency = 4\nrequests = 8\nduration_s = 5", "needs requests (per window) or duration_s"),
        (
            "concurrency = 4\nrequests = 4\nprompts = 8",
            "requests = 4 is fewer than prompts = 8: every prompt",
        ),
        ("concurrency = 4\nrequests = 8\ninput_len = [64, 32]", "input_len = [64, 32] is not [low, high]"),
        ("concurrency = 4\nrequests = 8\noutput_len = [1, 8]", "output_len must start at 2"),
        ("concurrency = 4\nrequests = 8\nobjective = 'goodput'", "needs slo_tpot_ms or slo_ttft_ms"),
        ("concurrency = 4\nrequests = 8\nslo_tpot_ms = 50", 'apply to objective = "goodput" only'),
        (
            "concurrency = 4\nrequests = 8\nobjective = 'latency'",
            "field `workload.objective`: Input should be",
        ),
    ]
    base = TARGET.read_text()
    for table, message in cases:
        path = tmp_path / "t.toml"
        path.write_text(f"{base}\n[workload]\n{table}\n")
        with pytest.raises(ConfigError) as err:
            load_target(path)
        assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    path.write_text(f"{base}\n[workload]\nconcurrency = 8\nrequests = 16\n")
    w = load_target(path).workload
    assert (
        w is not None and w.describe() == "concurrency 8, 16 requests per window, judged on output throughput"
    )


def test_prompts_and_lengths_follow_the_seed() -> None:
    w = WorkloadConfig(concurrency=2, requests=4, prompts=4, input_len=[3, 9], output_len=[4, 12], seed=5)
    items = workload_prompts(w)
    assert items == workload_prompts(w) and items != workload_prompts(w.model_copy(update={"seed": 6}))
    assert all(3 <= len(p.split()) <= 9 and 4 <= n <= 12 for p, n in items)
    assert len({p for p, _ in items}) == 4


def windowed(tokens_per_s: list[float], tpot_ms: float = 50.0, label: str = "a") -> Measurement:
    """A measurement of one window per throughput, 4 requests of 10 tokens each per window."""
    records, windows = [], []
    for k, rate in enumerate(tokens_per_s):
        windows.append(Window(index=k, concurrency=4, requests=4, output_tokens=40, wall_s=40 / rate))
        records += [
            RequestRecord(
                prompt_index=i,
                ttft_ms=100.0 + i,
                itl_ms=[tpot_ms + k] * 9,
                text=f"t{i}",
                completion_tokens=10,
                window=k,
            )
            for i in range(4)
        ]
    return summarize(label, "t", records, 4, sum(w.wall_s for w in windows), windows)


def test_arrivals_at_a_rate_follow_the_seed_and_the_window() -> None:
    w = WorkloadConfig(concurrency=4, requests=8, request_rate=5.0, seed=3)
    first = list(itertools.islice(arrivals(w, 0), 2000))
    assert first[:5] == list(itertools.islice(arrivals(w, 0), 5))  # the same for both arms
    assert first[:5] != list(itertools.islice(arrivals(w, 1), 5))  # another window, other gaps
    assert first == sorted(first) and 0.18 < first[-1] / 2000 < 0.22  # mean gap 1/rate
    assert w.describe().startswith("concurrency 4, 8 requests arriving at 5/s per window")


def test_the_window_is_the_unit_and_the_objective_sets_the_direction() -> None:
    w = WorkloadConfig(concurrency=4, requests=4, prompts=4)
    ref = windowed([100, 102, 98, 101, 99, 100])
    fast = windowed([150, 152, 149, 151, 148, 150], tpot_ms=40.0)
    ref_arm, fast_arm = arm_of(ref, 4, w), arm_of(fast, 4, w)
    assert len(ref_arm) == 1 and len(ref_arm[0]) == 6  # one stratum, one value per window
    cfg = DecisionConfig(looks=1)
    lk = look(ref_arm, fast_arm, LaunchNoise(sigma_log=0.01), cfg, 1)
    assert lk.verdict == "accepted" and 1.45 < lk.speedup < 1.55 and lk.requests_candidate == 6
    assert look(fast_arm, ref_arm, LaunchNoise(sigma_log=0.01), cfg, 1).verdict == "regression"
    # TPOT p99: the latency's log (lower is better); throughput: minus the log (higher is better)
    window = ref.windows[0]
    reqs = [r for r in ref.requests if r.window == 0]
    on = {
        o: w.model_copy(update={"objective": o})
        for o in ("tpot_p99", "output_throughput", "request_throughput")
    }
    assert window_cost(window, reqs, on["tpot_p99"]) == pytest.approx(math.log(50.0))
    assert window_cost(window, reqs, on["output_throughput"]) == pytest.approx(-math.log(100.0))
    assert window_cost(window, reqs, on["request_throughput"]) == pytest.approx(-math.log(10.0))
    tpot = w.model_copy(update={"objective": "tpot_p50"})
    assert (
        look(arm_of(ref, 4, tpot), arm_of(fast, 4, tpot), LaunchNoise(sigma_log=0.01), cfg, 1).speedup > 1.2
    )
    assert arm_of(ref, 4, None)[0].size == 6 and len(arm_of(ref, 4, None)) == 4  # sequential: by prompt


def test_goodput_counts_only_the_requests_within_the_slos() -> None:
    """Window k's requests have TPOT 50 + k ms, TTFT 100-103 ms: under TPOT <= 50.5 ms only window
    0's tokens count; adding TTFT <= 101.5 ms leaves its first two requests."""
    m = windowed([100, 100])
    w = WorkloadConfig(concurrency=4, requests=4, prompts=4, objective="goodput", slo_tpot_ms=50.5)
    assert w.describe().endswith("judged on goodput under TPOT <= 50.5 ms")
    (costs,) = arm_of(m, 4, w)
    assert costs == pytest.approx([-math.log(100.0), -math.log(1e-9)])  # all of window 0, none of 1
    both = w.model_copy(update={"slo_ttft_ms": 101.5})
    assert arm_of(m, 4, both)[0][0] == pytest.approx(-math.log(50.0))
    stats = arm_stats(m.requests, 4, 0, m.windows, both)
    assert stats.goodput_tok_per_s == pytest.approx(20 / 0.8) and stats.output_tok_per_s == pytest.approx(
        100.0
    )


def test_looks_on_one_launch_number_their_windows_on() -> None:
    both = merge(windowed([100, 101]), windowed([99, 98, 97]))
    assert [w.index for w in both.windows] == [0, 1, 2, 3, 4]
    assert {r.window for r in both.requests} == {0, 1, 2, 3, 4} and len(both.requests) == 20
    note = serving_note(both)
    assert note.startswith("; at concurrency 4: ") and "over 5 windows" in note
    assert serving_note(summarize("s", "t", both.requests, 4, 1.0)) == ""


def test_bench_serving_takes_one_range_ratio_and_request_counts() -> None:
    w = WorkloadConfig(concurrency=8, requests=16, input_len=[32, 128], output_len=[16, 64])
    assert bench_range_ratio(w) == 0.25
    with pytest.raises(ConfigError, match=r"output_len must be \[8, 64\]"):
        bench_range_ratio(w.model_copy(update={"output_len": [16, 64], "input_len": [16, 128]}))
    with pytest.raises(ConfigError, match="set \\[workload\\] requests instead of duration_s"):
        bench_range_ratio(WorkloadConfig(concurrency=8, duration_s=10.0))


def test_the_search_judges_a_trial_on_the_workload_objective() -> None:
    stats = ArmStats(
        tpot_ms_median=20.0, itl_ms_p50=20.0, itl_ms_p99=30.0, ttft_ms_median=90.0, requests=16,
        output_tok_per_s=400.0, requests_per_s=5.0, tpot_ms_p99=28.0, ttft_ms_p99=150.0, windows=4, concurrency=8,
    )  # fmt: skip
    j = Judgement(
        verdict="rejected", looks=[], launch_noise=LaunchNoise(sigma_log=0.1), min_gain=0.02, confidence=0.95,
        candidate=stats, objective="output_throughput",
    )  # fmt: skip
    d = Decision(iteration=1, source="search-1", verdict="rejected", reason="r", tpot_ms_after=20.0,
                 outputs_identical=True, judgement=j)  # fmt: skip
    w = WorkloadConfig(concurrency=8, requests=16)
    assert _objective(d) == 20.0  # no workload: the median TPOT
    assert _objective(d, w) == pytest.approx(-math.log(400.0))  # more tokens/s is lower (better)
    assert _objective(d, w.model_copy(update={"objective": "ttft_p99"})) == pytest.approx(math.log(150.0))
    assert _objective(d.model_copy(update={"verdict": "failed"}), w) is None


def test_stat_of_windowed_measurement_is_per_request() -> None:
    m = windowed([100, 100])
    assert m.tpot_ms == Stat(median=50.5, p25=50.0, p75=51.0, min=50.0, max=51.0, n=8)


def test_the_shipped_serving_target_loads_at_concurrency_8() -> None:
    """examples/targets/mla_server_glm5_serving.toml (benchmarks/search_serving_h200.sh runs it)."""
    t = load_target(TARGET.with_name("mla_server_glm5_serving.toml"))
    assert t.workload is not None and t.search is not None
    assert (t.workload.concurrency, t.workload.objective, t.decide.arms) == (
        8,
        "output_throughput",
        "alternating",  # one glm5 server at a time: paired blocks
    )
    assert t.search.max_minutes == 6 and "glm5" in t.launch.argv
    assert [k.name for k in t.search.knobs] == [
        "--max-total-tokens",
        "--cuda-graph-max-bs",
        "--num-continuous-decode-steps",
        "--enable-torch-compile",  # issue 58: the compile path, exact on the demo
    ]
    assert t.search.max_launches == 34  # the baseline's two and four blocks a trial
    assert "--max-running-requests" not in {k.name for k in t.search.knobs}  # it changed numerics
