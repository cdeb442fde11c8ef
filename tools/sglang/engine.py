"""SGLang (`kind = "sglang"`) as an engine: its launch flags, where the dormant profiler goes in
its release (tools/sglang/layout.py), and `sglang.bench_serving` beside perfloop's client.

SGLang's trace markers are its own `/start_profile` traces per rank (tools/sglang/server.py reads
their names); it emits no phase scopes perfloop reads. It states its context limit in
`/get_model_info` and `/get_server_info` (the KV pool bounds one request too).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from state.engines.sglang import HookSite
from tools.engines.contract import BenchClient, Engine
from tools.sglang.bench import find_bench, run_bench, window_requests
from tools.sglang.layout import hook_site, locate


class SglangEngine(Engine):
    """An SGLang server, from an upstream checkout or an installed site-packages tree."""

    name = "sglang"
    prefix_cache = True  # RadixAttention
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
    deterministic = ("--enable-deterministic-inference",)
    bench_by_default = True
    context_fields = (
        "/get_model_info context_length",
        "/get_server_info context_length",
        "/get_server_info max_total_num_tokens",
    )

    def hook_site(self, repo: Path, env: Mapping[str, str]) -> HookSite | None:
        """The eager-decode method of the release the checkout holds."""
        return hook_site(repo, locate(repo))

    def bench(self) -> BenchClient:
        """`python -m sglang.bench_serving` (or `sglang.benchmark.serving`) on the target host."""
        return BenchClient(
            "sglang with bench_serving", find_bench, run_bench, window_requests, "{module} (sglang {version})"
        )
