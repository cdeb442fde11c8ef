"""The playbooks beyond the pool cast, on real traces: CPU traces recorded here, H200 traces committed."""

import gzip
import json
import math
import statistics
from pathlib import Path

import pytest
import torch

from playbooks.engine import diagnose, load_playbooks
from playbooks.roofline import DEVICE_BANDWIDTH_GBS
from state.profiling.diagnosis import DiagnosisContext
from tools.trace import read_chrome_trace

from .test_trace import TRACES, matmul_heavy, record_trace, write_trace

US = 0.01
"""Tolerance for times the reader keeps in float32 columns (the trace has ns resolution), in us."""
CTX = DiagnosisContext(target_kind="mla_server", active_tokens=100, tpot_ms=14.0)
WEIGHT = torch.ones(2048, 1024, dtype=torch.bfloat16)
ACTIVATIONS = torch.ones(4, 1024)


def trace_events(name: str) -> list[dict]:
    """The raw Chrome trace events of a committed trace."""
    return json.loads(gzip.decompress((TRACES / name).read_bytes()))["traceEvents"]


def step_windows(events: list[dict]) -> list[tuple[str, list[dict]]]:
    """Each ProfilerStep with the kernels that started on the device between its start and the
    next step's (kernels before the first step belong to none): the step windows, from the events."""
    steps = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
        key=lambda e: e["ts"],
    )
    ends = [s["ts"] for s in steps[1:]] + [math.inf]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return [
        (s["name"], [k for k in kernels if s["ts"] <= k["ts"] < end])
        for s, end in zip(steps, ends, strict=True)
    ]


def idle_share(windows: list[tuple[str, list[dict]]]) -> float:
    """1 - (time some kernel runs) / (first kernel start to last kernel end), summed over windows."""
    busy = span = 0.0
    for _, kernels in windows:
        spans = sorted((k["ts"], k["ts"] + k["dur"]) for k in kernels)
        span += max(end for _, end in spans) - spans[0][0]
        start, end = spans[0]
        for s, e in spans[1:]:
            if s > end:
                busy, start = busy + end - start, s
            end = max(end, e)
        busy += end - start
    return 1 - busy / span


def item_in_decode(pool: torch.Tensor) -> None:
    """A decode step that reads a device scalar on the host every layer (a sync on a GPU)."""
    for _ in range(3):
        if pool[:64].to(torch.bfloat16).float().sum().item() > 1e9:
            break


def weight_upcast(pool: torch.Tensor) -> None:
    """A decode step that upcasts a BF16 weight to FP32 every layer."""
    for _ in range(3):
        ACTIVATIONS @ WEIGHT.float().t()


def findings_of(tmp_path: Path, step, ctx: DiagnosisContext = CTX, **kw):
    """Record a CPU trace of `step` and diagnose it."""
    path = tmp_path / "t.json.gz"
    record_trace(path, step, **kw)
    return diagnose(read_chrome_trace(path), ctx, load_playbooks()).findings


def test_launch_bound_on_real_h200_trace() -> None:
    """gather_then_cast_cuda: tiny kernels, the device idle ~85% of its span between them."""
    playbooks = load_playbooks()
    fixed = read_chrome_trace(TRACES / "gather_then_cast_cuda.json.gz")
    windows = step_windows(trace_events("gather_then_cast_cuda.json.gz"))
    kernels = [k for _, ks in windows for k in ks]
    act = fixed.device_activity
    assert act is not None and act.launch_bound and act.kernels == len(kernels)
    assert act.idle_share == pytest.approx(idle_share(windows)) and act.idle_share > 0.8
    assert act.median_kernel_us == pytest.approx(statistics.median(k["dur"] for k in kernels), abs=US)
    finding = diagnose(fixed, CTX, playbooks).findings[0]
    assert finding.playbook == "launch-bound-decode" and finding.confidence == 0.7
    assert 0.4 < finding.expected_gain_share < 0.8
    assert finding.expected_gain_ms == pytest.approx(finding.expected_gain_share * 14.0)
    per_step = len(kernels) / len(windows)
    assert f"{act.idle_share:.0%} of the device's span idle" in finding.evidence[0].note
    assert f"{per_step:.0f} kernels" in finding.evidence[0].note
    full = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz")
    assert full.device_activity is not None
    assert not full.device_activity.launch_bound  # the device is busy 89% of its span, yet...
    found = {f.playbook: f for f in diagnose(full, CTX, playbooks).findings}
    launch = found["launch-bound-decode"]  # ...the host needs longer to issue the kernels
    assert launch.bound == "host launch" and launch.bound_after == "device"
    assert "to issue 24 kernels" in launch.evidence[0].note


def test_steps_and_syncs_on_real_h200_trace() -> None:
    """The recorder synchronizes after forward_decode, outside it: a sync, but not in the decode path."""
    summary = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz")
    events = trace_events("full_pool_cast_cuda.json.gz")
    assert [(s.name, s.kernels, s.device_us) for s in summary.step_stats] == [
        (name, len(ks), pytest.approx(sum(k["dur"] for k in ks), abs=US)) for name, ks in step_windows(events)
    ]
    assert len(summary.step_stats) == 3
    syncs = [e for e in events if e.get("name") == "cudaDeviceSynchronize"]
    decode = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "forward_decode"]
    inside = [s for s in syncs if any(d["ts"] <= s["ts"] <= d["ts"] + d["dur"] for d in decode)]
    (sync,) = summary.syncs
    assert (sync.name, sync.calls, sync.decode_calls) == ("cudaDeviceSynchronize", len(syncs), len(inside))
    assert sync.calls > 0 and sync.decode_calls == 0
    assert "host-sync-in-decode" not in [
        f.playbook for f in diagnose(summary, CTX, load_playbooks()).findings
    ]


def test_roofline_of_the_pool_cast_on_h200() -> None:
    finding = diagnose(
        read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz"), CTX, load_playbooks()
    ).findings[0]
    roof = finding.roofline
    assert roof is not None and roof.bytes_per_call == 65536 * 576 * (1 + 2)
    assert roof.bandwidth_gbs == DEVICE_BANDWIDTH_GBS["H200"] and roof.bandwidth_source == "NVIDIA H200"
    assert roof.ideal_us_per_call == pytest.approx(65536 * 576 * 3 / 4.8e6, rel=1e-6)
    events = trace_events("full_pool_cast_cuda.json.gz")
    casts = [
        e
        for e in events
        if e.get("cat") == "cpu_op"
        and e["name"] == "aten::copy_"
        and e["args"]["Input Dims"][:2] == [[65536, 1, 576], [65536, 1, 576]]
    ]
    launched = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]
    }
    cast_us = sum(
        k["dur"]
        for k in events
        if k.get("cat") == "kernel"
        and any(c["ts"] <= launched[k["args"]["correlation"]] <= c["ts"] + c["dur"] for c in casts)
    )
    assert roof.measured_us_per_call == pytest.approx(cast_us / len(casts), abs=US)
    assert "113.2 MB per call" in roof.line and "20% of that bandwidth" in roof.line


def test_host_sync_in_decode_on_cpu_trace(tmp_path: Path) -> None:
    findings = findings_of(tmp_path, item_in_decode, with_stack=True)
    sync = next(f for f in findings if f.playbook == "host-sync-in-decode")
    (evidence,) = sync.evidence
    assert evidence.op == "aten::_local_scalar_dense" and evidence.calls == 6
    assert evidence.location is not None and "test_playbooks_signals.py" in evidence.location
    assert "item_in_decode" in evidence.location and "3.0 per step" in evidence.note


def test_sync_caller_is_the_op_without_stacks(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    record_trace(path, item_in_decode)
    (sync,) = read_chrome_trace(path).syncs
    assert (sync.name, sync.caller, sync.calls, sync.decode_calls) == (
        "aten::_local_scalar_dense",
        "aten::item",
        6,
        6,
    )


def test_weight_upcast_on_cpu_trace(tmp_path: Path) -> None:
    ctx = CTX.model_copy(update={"bandwidth_gbs": 20.0, "bandwidth_source": "flag"})
    findings = findings_of(tmp_path, weight_upcast, ctx)
    finding = next(f for f in findings if f.playbook == "weight-upcast-per-step")
    evidence = finding.evidence[0]
    assert evidence.op == "aten::copy_" and evidence.dims[0] == [2048, 1024] and evidence.calls == 6
    assert "c10::Float <- c10::BFloat16" not in evidence.note and "float <- c10::BFloat16" in evidence.note
    assert finding.expected_gain_share == pytest.approx(0.9 * evidence.share)
    assert finding.roofline is not None and finding.roofline.bytes_per_call == 2048 * 1024 * (2 + 4)
    assert "at 20 GB/s (flag)" in finding.roofline.line
    assert "kv-cache-full-pool-cast" not in [f.playbook for f in findings]


def test_generic_finding_names_the_source_line(tmp_path: Path) -> None:
    (finding,) = findings_of(tmp_path, matmul_heavy, with_stack=True)
    assert finding.playbook == "generic"
    assert "test_trace.py:" in finding.explanation and "(matmul_heavy)" in finding.explanation
    assert finding.evidence[0].location is not None


def test_cuda_graph_kernels_go_to_the_graph_row(tmp_path: Path) -> None:
    """Synthetic events (no GPU here): two kernels replayed by one cudaGraphLaunch inside an op."""
    host = {"pid": 1, "tid": 1}
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0.0, "dur": 100.0, **host},
        {"ph": "X", "cat": "cpu_op", "name": "sglang::replay", "ts": 1.0, "dur": 50.0, **host},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "ts": 2.0,
            "dur": 5.0,
            "args": {"correlation": 9},
            **host,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 10.0,
            "dur": 4.0,
            "args": {"correlation": 9, "device": 0},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "rmsnorm",
            "pid": 0,
            "tid": 7,
            "ts": 15.0,
            "dur": 2.0,
            "args": {"correlation": 9, "device": 0},
        },
    ]
    summary = read_chrome_trace(write_trace(tmp_path, events))
    rows = {op.name: op for op in summary.ops}
    assert rows["CUDA graph"].self_us == 6.0 and rows["CUDA graph"].calls == 1
    assert rows["sglang::replay"].self_us == 0.0 and rows["sglang::replay"].total_us == 6.0
    assert [(k.name, k.graph_calls) for k in summary.kernels] == [("gemm", 1), ("rmsnorm", 1)]
    assert summary.device_activity is not None
    assert summary.device_activity.busy_us == 6.0 and summary.device_activity.span_us == 7.0
