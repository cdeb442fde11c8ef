"""The embedded demo server (`kind = "mla_server"`, examples/targets/mla_server) as an engine.

Its launch flags are its own argparse's (examples/targets/mla_server/mla_server/config.py), among
them SGLang's compile path (`--enable-torch-compile`, `--torch-compile-max-bs`: exact by default,
its compile timed inside the launch, mla_server/compile.py); the
target file's `[profile] model_runner_path` names where the dormant profiler goes; it states its
context limit in `/get_server_info` and `/v1/models`; it has no serving benchmark of its own.
"""

from __future__ import annotations

from tools.engines.contract import Engine


class DemoEngine(Engine):
    """The CPU/GPU MLA decode server perfloop ships as its demo target."""

    name = "mla_server"
    changeable_flags = (
        "--preset",
        "--device",
        "--pool-slots",
        "--layers",
        "--max-total-tokens",
        "--max-running-requests",
        "--max-tokens-limit",
        "--default-max-tokens",
        "--threads",
        "--disable-cuda-graph",
        "--cuda-graph-max-bs",
        "--cuda-graph-bs",
        "--num-continuous-decode-steps",
        "--enable-torch-compile",
        "--torch-compile-max-bs",
    )
    batch_flag = "--max-running-requests"
    deterministic = ("--enable-deterministic-inference",)
    context_fields = ("/get_server_info context_len", "/v1/models max_model_len")
