"""Kineto-shaped trace events of the demo's glm5 decode step with the timings measured on one H200.

The issue-13 numbers (torch 2.11, one request): eager, the host needs ~85 ms to issue a step's
kernels while the device runs 81 ms of them with the full-pool cast (66.5 ms of it the cast, one
~0.85 ms copy per layer) and 14.5 ms without; replayed as one CUDA graph the step takes 82.3 ms with
the cast. Kernels are fewer here (20 per layer instead of ~75) so the test stays fast; the per-kernel
host and device costs are scaled to keep the per-step totals.
"""

import gzip
import json
from pathlib import Path

from state.profiling.profile import ProfileSummary
from tools.trace import read_chrome_trace

LAYERS = 78
KERNELS_PER_LAYER = 20
POOL = [495552, 1, 576]
CAST_KERNEL = (
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const"
    "::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>, 4>"
)
OTHER_KERNEL = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_128x64_64x3_tn_align2>"
CAST_US = 66500 / LAYERS
OTHER_US = 14500 / (LAYERS * (KERNELS_PER_LAYER - 1))
HOST_PER_KERNEL_US = 85000 / (LAYERS * KERNELS_PER_LAYER)
PRE_US, POST_US = 300.0, 400.0


def _x(cat: str, name: str, ts: float, dur: float, **args) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": 1 if cat != "kernel" else 7,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def glm5_events(cast: bool, graph: bool, steps: int = 3, blocking_graph_launch: bool = False) -> list[dict]:
    """Events of `steps` decode steps: eager (a launch per kernel) or one CUDA-graph launch each
    (`blocking_graph_launch`: the launch call lasts until the replay's last kernel ends, as CUPTI
    made it on the H200 under /start_profile)."""
    events: list[dict] = []
    t, corr = 1000.0, 1
    for n in range(steps):
        start, host = t, t + PRE_US
        kernels = [
            (CAST_KERNEL, CAST_US if cast else 2.0) if k == 0 else (OTHER_KERNEL, OTHER_US)
            for _ in range(LAYERS)
            for k in range(KERNELS_PER_LAYER)
        ]
        device = host
        if graph:
            device = host + 25
            launch_at = host
            for name, dur in kernels:
                events.append(_x("kernel", name, device, dur, correlation=corr, device=0))
                device += dur + 0.5
            call_us = device - launch_at if blocking_graph_launch else 20.0
            events.append(_x("cuda_runtime", "cudaGraphLaunch", launch_at, call_us, correlation=corr))
            host += call_us
            corr += 1
            if blocking_graph_launch:  # the sampling kernel, launched once the call returned
                events.append(_x("cuda_runtime", "cudaLaunchKernel", host, 4.0, correlation=corr))
                events.append(_x("kernel", OTHER_KERNEL, host + 6, 5.0, correlation=corr, device=0))
                host, device = host + 5, host + 11
            corr += 1
        else:
            for k, (name, dur) in enumerate(kernels):
                dims = [POOL, POOL, []] if k % KERNELS_PER_LAYER == 0 else [[8, 2048], [2048, 2048]]
                op = "aten::copy_" if k % KERNELS_PER_LAYER == 0 else "aten::mm"
                types = ["c10::BFloat16", "c10::Float8_e4m3fn", ""] if op == "aten::copy_" else []
                events.append(
                    _x("cpu_op", op, host, HOST_PER_KERNEL_US, **{"Input Dims": dims, "Input type": types})
                )
                launch = host + HOST_PER_KERNEL_US - 5
                events.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 4.0, correlation=corr))
                begin = max(device, launch + 5)
                events.append(_x("kernel", name, begin, dur, correlation=corr, device=0))
                device = begin + dur
                host += HOST_PER_KERNEL_US
                corr += 1
        sync_end = max(host, device) + 5
        events.append(_x("cuda_runtime", "cudaStreamSynchronize", host, sync_end - host))
        end = sync_end + POST_US
        events.append(_x("user_annotation", f"ProfilerStep#{n}", start, end - start))
        t = end + 10
    return events


def glm5_profile(
    folder: Path, cast: bool, graph: bool, blocking_graph_launch: bool = False
) -> ProfileSummary:
    """The events written as a Chrome trace into `folder`, then read as the loop reads a trace."""
    path = folder / f"glm5-{'cast' if cast else 'gather'}-{'graph' if graph else 'eager'}.json.gz"
    with gzip.open(path, "wt") as out:
        json.dump({"traceEvents": glm5_events(cast, graph, blocking_graph_launch=blocking_graph_launch)}, out)
    return read_chrome_trace(path)
