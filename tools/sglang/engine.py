"""SGLang (`kind = "sglang"`) as an engine: its launch flags, where the dormant profiler goes in
its release (tools/sglang/layout.py), and `sglang.bench_serving` beside perfloop's client.

SGLang's trace markers are its own `/start_profile` traces per rank (tools/sglang/server.py reads
their names); it emits no phase scopes perfloop reads. It states its context limit in
`/get_model_info` and `/get_server_info` (the KV pool bounds one request too).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from state.sglang import HookSite
from state.target import BenchServingConfig
from state.workload import WorkloadConfig
from tools.engines.contract import Engine, Runs
from tools.sglang.bench import find_bench, run_bench
from tools.sglang.layout import hook_site, locate


class SglangBench:
    """`python -m sglang.bench_serving` (or `sglang.benchmark.serving`) on the target host."""

    needs = "sglang with bench_serving"

    def find(self, python: str) -> tuple[str, str] | None:
        return find_bench(python)

    def run(
        self,
        python: str,
        module: str,
        cfg: BenchServingConfig,
        base_url: str,
        model: str,
        num_prompts: int,
        output_len: int,
        repeats: int,
        warmup: int,
        request_timeout_s: float,
        repo: str,
        label: str,
        workload: WorkloadConfig | None = None,
    ) -> Runs:
        return run_bench(
            python, module, cfg, base_url, model, num_prompts, output_len, repeats, warmup,
            request_timeout_s, repo, label, workload,
        )  # fmt: skip

    def client_name(self, module: str, version: str) -> str:
        return f"{module} (sglang {version})"


class SglangEngine(Engine):
    """An SGLang server, from an upstream checkout or an installed site-packages tree."""

    name = "sglang"
    changeable_flags = (
        "--mem-fraction-static",
        "--max-total-tokens",
        "--max-running-requests",
        "--max-prefill-tokens",
        "--chunked-prefill-size",
        "--schedule-policy",
        "--schedule-conservativeness",
        "--page-size",
        "--kv-cache-dtype",
        "--attention-backend",
        "--prefill-attention-backend",
        "--decode-attention-backend",
        "--sampling-backend",
        "--disable-cuda-graph",
        "--disable-cuda-graph-padding",
        "--cuda-graph-max-bs",
        "--cuda-graph-bs",
        "--enable-torch-compile",
        "--torch-compile-max-bs",
        "--disable-radix-cache",
        "--disable-overlap-schedule",
        "--enable-mixed-chunk",
        "--enable-two-batch-overlap",
        "--num-continuous-decode-steps",
        "--stream-interval",
        "--triton-attention-num-kv-splits",
    )
    batch_flag = "--max-running-requests"
    bench_by_default = True
    context_fields = (
        "/get_model_info context_length",
        "/get_server_info context_length",
        "/get_server_info max_total_num_tokens",
    )

    def hook_site(self, repo: Path, env: Mapping[str, str]) -> HookSite | None:
        """The eager-decode method of the release the checkout holds."""
        return hook_site(repo, locate(repo))

    def bench(self) -> SglangBench:
        return SglangBench()
