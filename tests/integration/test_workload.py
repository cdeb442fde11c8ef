"""`[workload]` against a real demo server (CPU preset, one thread): windows that keep the
concurrency in flight, the same greedy outputs at any concurrency, the rule's windows, and two
arms interleaved by window."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from agent.decision.arms.measuring import merge
from agent.decision.stats.levels import at_level
from agent.decision.stats.rule import arm_of, look
from state.config.target import MeasureConfig
from state.door.calls import MeasureArgs, PairArgs, ServerArgs
from state.engines.process import ServerHandle
from state.measurement.decision import DecisionConfig, LaunchNoise
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from tests.launching import launch_demo
from tools import bench, server
from tools.client.windows import arrivals

ARGV = ["bash", "launch.sh", "--port", "{port}", "--preset", "cpu", "--threads", "1", "--pool-slots", "8192"]
WORKLOAD = WorkloadConfig(
    concurrency=4, requests=4, prompts=4, input_len=[4, 12], output_len=[4, 6], warmup_windows=1
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    logs = tmp_path_factory.mktemp("workload-server")
    handle = launch_demo(ARGV, logs / "server.log")
    yield handle
    server.stop(ServerArgs(server=handle, grace_s=5))


def measured(handle: ServerHandle, w: WorkloadConfig, windows: int, label: str = "arm") -> Measurement:
    args = MeasureArgs(
        base_url=handle.base_url,
        model="mla-demo",
        config=MeasureConfig(prompts=["unused by a workload"], repeats=windows),
        label=label,
        tree_sha256="t",
        workload=w,
    )
    return bench.measure(args).measurement


def test_windows_keep_the_concurrency_in_flight_and_outputs_do_not_depend_on_it(demo: ServerHandle) -> None:
    """Each window starts all 4 requests before any of them ends (closed loop at concurrency 4);
    its tokens and requests are counted; the greedy texts equal those sent one at a time, so the
    output gate holds at concurrency; 4 in flight on the demo's batched decode give more tokens/s
    than 1 (the rule's point estimate over windows, judged on output throughput; 1.6-2.0x seen at
    load average 4-5 on the shared 2-core machine)."""
    m = measured(demo, WORKLOAD, windows=2)
    assert [(w.index, w.requests, w.concurrency) for w in m.windows] == [(0, 4, 4), (1, 4, 4)]
    for w in m.windows:
        reqs = [r for r in m.requests if r.window == w.index]
        ends = [(r.start_ms or 0) + r.ttft_ms + sum(r.itl_ms) for r in reqs]
        assert max(r.start_ms or 0 for r in reqs) < min(ends)  # all 4 in flight at once
        assert w.output_tokens == sum(r.completion_tokens for r in reqs) and w.wall_s * 1000 >= max(ends)
        assert sorted(r.prompt_index for r in reqs) == [0, 1, 2, 3]
        assert all(4 <= r.completion_tokens <= 6 for r in reqs)
    assert m.outputs_stable and len(m.outputs) == 4
    one = measured(demo, WORKLOAD.model_copy(update={"concurrency": 1, "warmup_windows": 0}), windows=1)
    assert one.outputs == m.outputs
    # throughput on 10-token generations, where decode (which batches) outweighs prefill; the two
    # arms' windows alternate so that a change of the shared machine's load hits both
    ten = WORKLOAD.model_copy(update={"output_len": [10, 10], "warmup_windows": 0})
    arms: dict[int, list[Measurement]] = {1: [], 4: []}
    for c in (1, 4, 4, 1):
        arms[c].append(measured(demo, ten.model_copy(update={"concurrency": c}), windows=1))
    one, four = (merge(*arms[c]) for c in (1, 4))
    lk = look(arm_of(one, 4, ten), arm_of(four, 4, ten), LaunchNoise(sigma_log=0.05), DecisionConfig(), 1)
    print(f"concurrency 4 vs 1: output throughput {lk.speedup:.2f}x [{lk.ci_low:.2f}, {lk.ci_high:.2f}]")
    assert lk.requests_candidate == 2 and lk.prompts == 1 and lk.speedup > 1.2


def test_interleaved_arms_alternate_whole_windows(demo: ServerHandle) -> None:
    """measure_pair under `[workload]`: both arms (here the one server twice, an A/A pair) get
    their windows in rounds, each window whole at the concurrency, the same outputs."""
    w = WORKLOAD.model_copy(update={"warmup_windows": 0})  # the server is warm by now
    arm = {"model": "mla-demo", "tree_sha256": "t", "workload": w, "base_url": demo.base_url}
    cfg = MeasureConfig(prompts=["unused by a workload"], repeats=2)
    pair = bench.measure_pair(
        PairArgs(
            reference=MeasureArgs(label="ref", config=cfg, **arm),
            candidate=MeasureArgs(label="cand", config=cfg, **arm),
        )
    )
    ref, cand = pair.reference, pair.candidate
    assert [w.requests for w in ref.windows] == [4, 4] and [w.requests for w in cand.windows] == [4, 4]
    assert ref.outputs == cand.outputs and ref.outputs_stable and cand.outputs_stable
    assert {r.window for r in cand.requests} == {0, 1} and len(ref.probe_ms) == 2


def test_at_a_request_rate_no_request_starts_before_it_arrives(demo: ServerHandle) -> None:
    """Open loop: 4 requests arriving at 4/s (seeded Poisson), at most 4 in flight: each starts no
    earlier than its arrival, so the window spans the arrivals rather than starting all at once."""
    w = WORKLOAD.model_copy(update={"request_rate": 4.0, "warmup_windows": 0})
    m = measured(demo, w, windows=1)
    due = list(itertools.islice(arrivals(w, 0), 4))
    starts = {r.prompt_index: r.start_ms or 0.0 for r in m.requests}
    assert sorted(starts) == [0, 1, 2, 3] and m.windows[0].requests == 4
    assert all(starts[i] >= due[i] * 1000 for i in range(4)), (starts, due)
    assert m.windows[0].wall_s > due[3]


def test_a_window_of_a_duration_starts_no_request_after_it(demo: ServerHandle) -> None:
    """`duration_s`: requests keep starting (2 in flight) until 1.5 s have passed, every prompt at
    least once; none starts later, and the window lasts until the last one ends."""
    w = WorkloadConfig(
        concurrency=2, duration_s=1.5, prompts=2, input_len=[2, 4], output_len=[3, 3], warmup_windows=0
    )
    m = measured(demo, w, windows=1)
    (window,) = m.windows
    starts = sorted(r.start_ms or 0.0 for r in m.requests)
    assert window.requests == len(m.requests) >= 2 and {r.prompt_index for r in m.requests} == {0, 1}
    assert all(s < 1500 for s in starts[2:]), starts  # beyond the first of each prompt: before 1.5 s
    assert window.wall_s >= max(starts) / 1000 and m.outputs_stable


def test_several_levels_measure_a_window_at_each_per_repeat(demo: ServerHandle) -> None:
    """`concurrency = [4, 1]`: each repeat is a window at 4 then one at 1 (numbered 2k + j), each
    whole at its level, the same greedy outputs at both; the rule sees the primary's windows only."""
    w = WORKLOAD.model_copy(update={"concurrency": [4, 1], "warmup_windows": 0})
    m = measured(demo, w, windows=2)
    assert [(x.index, x.concurrency, x.requests) for x in m.windows] == [
        (0, 4, 4),
        (1, 1, 4),
        (2, 4, 4),
        (3, 1, 4),
    ]
    for x in m.windows:
        reqs = sorted((r for r in m.requests if r.window == x.index), key=lambda r: r.start_ms or 0.0)
        ends = [(r.start_ms or 0) + r.ttft_ms + sum(r.itl_ms) for r in reqs]
        if x.concurrency == 4:
            assert max(r.start_ms or 0 for r in reqs) < min(ends)  # all 4 in flight at once
        else:
            assert all((b.start_ms or 0) >= a for a, b in zip(ends, reqs[1:], strict=False))  # one at a time
    assert m.outputs_stable and len(m.outputs) == 4
    assert len(arm_of(m, 4, w)[0]) == 2 and len(arm_of(at_level(m, 1), 4, w.at(1))[0]) == 2
