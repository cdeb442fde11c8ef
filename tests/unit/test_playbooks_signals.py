"""The playbooks beyond the pool cast, on real traces: CPU traces recorded here, H200 traces committed."""

from pathlib import Path

import pytest
import torch

from playbooks.engine import diagnose, load_playbooks
from playbooks.roofline import DEVICE_BANDWIDTH_GBS
from state.diagnosis import DiagnosisContext
from tools.trace import read_chrome_trace, summarize_events

from .test_trace import TRACES, matmul_heavy, record_trace

CTX = DiagnosisContext(target_kind="mla_server", active_tokens=100, tpot_ms=14.0)
WEIGHT = torch.ones(2048, 1024, dtype=torch.bfloat16)
ACTIVATIONS = torch.ones(4, 1024)


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
    act = fixed.device_activity
    assert act is not None and act.launch_bound and act.idle_share > 0.8 and act.median_kernel_us < 5
    finding = diagnose(fixed, CTX, playbooks).findings[0]
    assert finding.playbook == "launch-bound-decode" and finding.confidence == 0.7
    assert 0.4 < finding.expected_gain_share < 0.8
    assert finding.expected_gain_ms == pytest.approx(finding.expected_gain_share * 14.0)
    assert "idle" in finding.evidence[0].note and "24 kernels" in finding.evidence[0].note
    full = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz")
    assert not full.device_activity.launch_bound  # the device is busy 89% of its span, yet...
    found = {f.playbook: f for f in diagnose(full, CTX, playbooks).findings}
    launch = found["launch-bound-decode"]  # ...the host needs longer to issue the kernels
    assert launch.bound == "host launch" and launch.bound_after == "device"
    assert "to issue 24 kernels" in launch.evidence[0].note


def test_steps_and_syncs_on_real_h200_trace() -> None:
    """The recorder synchronizes after forward_decode, outside it: a sync, but not in the decode path."""
    summary = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz")
    assert [s.name for s in summary.step_stats] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert all(s.kernels == 24 and s.device_us == pytest.approx(541, abs=2) for s in summary.step_stats)
    (sync,) = summary.syncs
    assert sync.name == "cudaDeviceSynchronize" and sync.calls == 4 and sync.decode_calls == 0
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
    assert roof.measured_us_per_call == pytest.approx(1387.9 / 12, abs=1)
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


def test_cuda_graph_kernels_go_to_the_graph_row() -> None:
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
    summary = summarize_events(events, "inline")
    rows = {op.name: op for op in summary.ops}
    assert rows["CUDA graph"].self_us == 6.0 and rows["CUDA graph"].calls == 1
    assert rows["sglang::replay"].self_us == 0.0 and rows["sglang::replay"].total_us == 6.0
    assert [(k.name, k.graph_calls) for k in summary.kernels] == [("gemm", 1), ("rmsnorm", 1)]
    assert summary.device_activity.busy_us == 6.0 and summary.device_activity.span_us == 7.0
