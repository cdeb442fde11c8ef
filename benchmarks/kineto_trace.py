"""A synthetic but real-shaped torch.profiler trace (Kineto's JSON layout and event schema):
ProfilerStep#N / forward_decode annotations, nested aten ops with shapes and dtypes,
cudaLaunchKernel calls, kernels with correlation and External id, ac2g flow events, of an MLA-style
decode step repeated until the file reaches a given size. Used by trace_analysis_vs_hta.py."""

import json
import random
from pathlib import Path

LAYERS = 61
KERNELS = [  # (name, mean us) of one layer's kernels, MLA decode on a large GPU
    (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}, "
        "std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
        "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >",
        115.0,
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_"
        "bf16_s16816gemm_bf16_64x64_64x4_tn_align8::Params)",
        9.3,
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8>(cutlass_80_"
        "tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8::Params)",
        6.6,
    ),
    (
        "void flashinfer::BatchDecodeWithPagedKVCacheKernelMLA<true, 4u, 16u, 8u, 2u, 4u, __nv_bfloat16, "
        "__nv_bfloat16, __nv_bfloat16, int>(flashinfer::Params)",
        7.9,
    ),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", 2.4),
    ("triton_poi_fused_silu_mul_1", 1.9),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)",
        1.6,
    ),
    (
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_"
        "impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)"
        "::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>)::{lambda(int)#1}>"
        "(long, at::native::gpu_index_kernel::{lambda(int)#1})",
        3.1,
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, "
        "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
        2.2,
    ),
    (
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, "
        "false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*)",
        1.3,
    ),
    (
        "void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, unsigned long)",
        1.1,
    ),
]
# one layer: (outer op, inner op or None, kernel index, input dims, input types)
LAYER_OPS = [
    (
        "aten::to",
        "aten::copy_",
        0,
        [[495552, 1, 576], [495552, 1, 576], []],
        ["c10::BFloat16", "c10::Float8_e4m3fn", ""],
    ),
    ("aten::linear", "aten::mm", 1, [[1, 7168], [7168, 2112]], ["c10::BFloat16", "c10::BFloat16"]),
    ("aten::linear", "aten::mm", 2, [[1, 2048], [2048, 7168]], ["c10::BFloat16", "c10::BFloat16"]),
    ("sglang::mla_decode", None, 3, [[1, 16, 576], [495552, 1, 576]], ["c10::BFloat16", "c10::BFloat16"]),
    ("aten::rms_norm", None, 4, [[1, 7168], [7168]], ["c10::BFloat16", "c10::BFloat16"]),
    ("aten::silu", None, 5, [[1, 18432]], ["c10::BFloat16"]),
    ("aten::add", None, 6, [[1, 7168], [1, 7168], []], ["c10::BFloat16", "c10::BFloat16", "Scalar"]),
    ("aten::index", None, 7, [[495552, 1, 576], []], ["c10::BFloat16", ""]),
    ("aten::_softmax", None, 8, [[16, 230], [], []], ["c10::BFloat16", "Scalar", "Scalar"]),
    ("aten::addmm", None, 9, [[7168], [1, 7168], [7168, 7168]], ["c10::BFloat16"] * 3),
    ("sglang::moe_align_block_size", None, 10, [[1, 8]], ["int"]),
]
HOST_PID = 437


def _host(cat: str, name: str, ts: float, dur: float, args: str) -> str:
    return (
        f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {HOST_PID}, "tid": {HOST_PID},\n'
        f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }}'
    )


def _op_args(ext: int, dims: list, types: list) -> str:
    strides = [[1] * len(d) for d in dims]
    return (
        f'"External id": {ext},"Record function id": 0, "Concrete Inputs": {json.dumps([""] * len(dims))}, '
        f'"Input type": {json.dumps(types)}, "Input Strides": {json.dumps(strides)}, '
        f'"Input Dims": {json.dumps(dims)}, "Ev Idx": {ext - 1}'
    )


class Writer:
    """Emits one decode step at a time, with running timestamps and ids."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.ts = 5088980768299.323
        self.ext = 0
        self.corr = 300

    def step(self, n: int) -> list[str]:
        host, device = [], []
        step_start, gpu_ts = self.ts, self.ts + 30.0
        self.ts += 20.0
        self.ext += 1
        step_ext = self.ext
        for _ in range(LAYERS):
            for outer, inner, k, dims, types in LAYER_OPS:
                self.ext += 1
                outer_ext, outer_ts = self.ext, self.ts
                self.ts += 2.0
                if inner is not None:
                    self.ext += 1
                    inner_ext, inner_ts = self.ext, self.ts
                    self.ts += 1.5
                else:
                    inner_ext, inner_ts = outer_ext, outer_ts
                self.corr += 1
                launch_ts = self.ts
                self.ts += 4.2
                host.append(
                    _host(
                        "cuda_runtime",
                        "cudaLaunchKernel",
                        launch_ts,
                        4.0,
                        f'"External id": {inner_ext}, "cbid": 211, "correlation": {self.corr}',
                    )
                )
                host.append(
                    f'  {{\n    "ph": "s", "id": {self.corr}, "pid": {HOST_PID}, "tid": {HOST_PID}, '
                    f'"ts": {launch_ts:.3f},\n    "cat": "ac2g", "name": "ac2g"\n  }}'
                )
                dur = max(KERNELS[k][1] * self.rng.uniform(0.8, 1.2), 0.5)
                gpu_ts = max(gpu_ts, launch_ts + 3.0)
                device.append(
                    f'  {{\n    "ph": "X", "cat": "kernel", "name": "{KERNELS[k][0]}", "pid": 0, "tid": 7,\n'
                    f'    "ts": {gpu_ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      "External id": {inner_ext},\n'
                    f'      "queued": 0, "device": 0, "context": 1,\n      "stream": 7, "correlation": {self.corr},\n'
                    f'      "registers per thread": 32, "shared memory": 0, "blocks per SM": 558.5, '
                    f'"warps per SM": 2234.2, "grid": [73728, 1, 1], "block": [128, 1, 1], '
                    f'"est. achieved occupancy %": 100\n    }}\n  }}'
                )
                device.append(
                    f'  {{\n    "ph": "f", "id": {self.corr}, "pid": 0, "tid": 7, "ts": {gpu_ts:.3f}, '
                    f'"cat": "ac2g", "name": "ac2g", "bp": "e"\n  }}'
                )
                gpu_ts += dur + 0.8
                if inner is not None:
                    host.append(
                        _host("cpu_op", inner, inner_ts, self.ts - inner_ts, _op_args(inner_ext, dims, types))
                    )
                self.ts += 1.0
                host.append(
                    _host("cpu_op", outer, outer_ts, self.ts - outer_ts, _op_args(outer_ext, dims, types))
                )
        self.ts = max(self.ts, gpu_ts) + 10.0
        host.append(
            _host(
                "user_annotation",
                f"ProfilerStep#{n}",
                step_start,
                self.ts - step_start,
                f'"External id": {step_ext}, "Record function id": 0, "Ev Idx": 0',
            )
        )
        return host + device


def write_trace(path: Path, size_bytes: int, rank: int = 0, world: int = 1) -> int:
    """A Kineto-layout trace of at least size_bytes (rank `rank` of `world`, its own random
    durations); returns the number of steps written."""
    writer, steps, written = Writer(seed=rank), 0, 0
    with path.open("w") as out:
        head = (
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {\n      "id": 0, "name": "NVIDIA H200", '
            '"totalGlobalMem": 150109880320,\n      "computeMajor": 9, "computeMinor": 0, "numSms": 132\n    }\n  ],\n'
            '  "distributedInfo": {"backend": "nccl", "rank": RANK, "world_size": WORLD},\n  "record_shapes": 1,\n'
            '  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n'
        )
        written += out.write(head.replace("RANK", str(rank)).replace("WORLD", str(world)))
        first = True
        while written < size_bytes:
            events = writer.step(steps + 2)
            written += out.write(("" if first else ",\n") + ",\n".join(events))
            first, steps = False, steps + 1
        written += out.write('\n],\n  "traceName": "synthetic.json"\n}\n')
    return steps
