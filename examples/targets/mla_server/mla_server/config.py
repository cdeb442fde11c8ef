"""Server configuration: presets and command-line flags."""

import argparse
import sys
from dataclasses import dataclass

PRESETS = {
    # Sized so the full-pool cast dominates decode on a 2-core CPU (see README.md).
    "cpu": dict(pool_slots=24576, layers=4, heads=4, hidden=256, experts=4, top_k=2, ffn=256,
                max_running=4, context_len=1024),
    # GLM-5 / DeepSeek-style attention geometry: 495,552-slot FP8 pool, 78 layers, 16 heads.
    "glm5": dict(pool_slots=495552, layers=78, heads=16, hidden=2048, experts=8, top_k=2,
                 ffn=1024, max_running=8, context_len=4096),
}


@dataclass(frozen=True)
class ServerConfig:
    """Everything that shapes the server; the same config gives the same greedy outputs."""

    host: str
    port: int
    preset: str
    device: str
    pool_slots: int
    layers: int
    heads: int
    hidden: int
    experts: int
    top_k: int
    ffn: int
    max_running: int
    context_len: int
    max_tokens_limit: int
    default_max_tokens: int
    seed: int
    threads: int | None
    model_name: str
    disable_cuda_graph: bool = False
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = None
    tp_size: int = 1
    tp_rank: int = 0
    num_continuous_decode_steps: int = 1
    enable_deterministic_inference: bool = False
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 32
    dtype: str = "bfloat16"

    @property
    def static_decode(self) -> bool:
        """Whether decode runs the static-shape step (on cuda, with or without CUDA graphs)."""
        return self.device == "cuda"

    @property
    def use_cuda_graph(self) -> bool:
        """Whether decode steps replay CUDA graphs captured at start-up (cuda only)."""
        return self.static_decode and not self.disable_cuda_graph

    def decode_batch_sizes(self) -> list[int]:
        """The padded batch sizes of the static decode step, ascending: the CUDA-graph batch sizes
        (captured unless --disable-cuda-graph, which pads the same way); a larger batch runs eagerly
        padded to --max-running."""
        limit = min(self.cuda_graph_max_bs or self.max_running, self.max_running)
        if self.enable_deterministic_inference:  # one shape for every batch: batch-invariant
            return [self.max_running]
        if self.cuda_graph_bs:
            return sorted({bs for bs in self.cuda_graph_bs if bs <= self.max_running})
        sizes = [1, 2, 4, 8] + list(range(16, limit + 1, 8))
        return sorted({bs for bs in sizes if bs <= limit} | {limit})


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as a single line and exits with status 2."""

    def error(self, message):
        sys.stderr.write(f"mla_server: error: {message}\n")
        sys.exit(2)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The launch.sh flags; preset-sized flags default to None (= take the preset's value)."""
    p = _OneLineParser(prog="mla_server", description="MLA decode demo server")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    for name in PRESETS["cpu"]:
        p.add_argument("--" + name.replace("_", "-"), type=_positive, default=None,
                       help="override the preset's value")
    # SGLang's names for two of them, so that a launch written for SGLang (or a search over its
    # options) works here: both change speed (a smaller pool is a smaller cast per decode step
    # until the kv-cache patch; fewer running requests are smaller decode batches).
    p.add_argument("--max-total-tokens", dest="pool_slots", type=_positive, default=None,
                   help="KV pool size in tokens (SGLang's name for --pool-slots)")
    p.add_argument("--max-running-requests", dest="max_running", type=_positive, default=None,
                   help="most requests decoded together (SGLang's name for --max-running)")
    p.add_argument("--max-tokens-limit", type=_positive, default=1024,
                   help="largest max_tokens a request may ask for")
    p.add_argument("--default-max-tokens", type=_positive, default=128)
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.add_argument("--threads", type=_positive, default=None, help="torch.set_num_threads")
    p.add_argument("--model-name", default="mla-demo", help="the served model id")
    p.add_argument("--disable-cuda-graph", action="store_true",
                   help="decode eagerly (same static shapes, no CUDA graphs); cpu is always eager")
    p.add_argument("--cuda-graph-max-bs", type=_positive, default=None,
                   help="capture CUDA graphs for batch sizes up to this (default: --max-running)")
    p.add_argument("--cuda-graph-bs", type=_positive, nargs="+", default=None,
                   help="exactly these CUDA-graph batch sizes (instead of 1, 2, 4, 8, 16, 24, ...)")
    p.add_argument("--tp-size", type=_positive, default=1,
                   help="tensor-parallel ranks, one process each (rank 0 serves HTTP)")
    p.add_argument("--tp-rank", type=int, default=0, help=argparse.SUPPRESS)  # set by rank 0 only
    p.add_argument("--num-continuous-decode-steps", type=_positive, default=1,
                   help="decode steps run before new requests are admitted (as in SGLang): less "
                        "scheduling per token, later admission")
    p.add_argument("--enable-deterministic-inference", action="store_true",
                   help="batch-invariant decode (SGLang's name): every step padded to --max-running, "
                        "so a request's output does not depend on what shares its steps (slower)")
    p.add_argument("--enable-torch-compile", action="store_true",
                   help="decode through torch.compile'd layer math (SGLang's name), compiled and warmed "
                        "up at start-up, before the CUDA graphs capture it; exact: inductor keeps "
                        "eager's roundings (mla_server/compile.py)")
    p.add_argument("--torch-compile-max-bs", type=_positive, default=32,
                   help="largest decode batch that runs compiled (SGLang's name); larger ones run eagerly")
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="what weights and activations are computed in; float32: the same bfloat16 "
                        "weights upcast exactly, a precision reference of the model's math")
    return p


def parse_config(argv: list[str]) -> ServerConfig:
    """Parse flags into a ServerConfig, filling unset sizes from the preset."""
    args = vars(build_parser().parse_args(argv))
    for name, value in PRESETS[args["preset"]].items():
        if args[name] is None:
            args[name] = value
    if args["top_k"] > args["experts"]:
        build_parser().error(f"--top-k {args['top_k']} exceeds --experts {args['experts']}")
    for name in ("heads", "ffn"):
        if args[name] % args["tp_size"]:
            build_parser().error(f"--tp-size {args['tp_size']} does not divide --{name} {args[name]}")
    if args["enable_torch_compile"] and args["tp_size"] > 1:
        build_parser().error("--enable-torch-compile is not supported with --tp-size > 1 here")
    if args["cuda_graph_bs"] is not None:
        args["cuda_graph_bs"] = tuple(args["cuda_graph_bs"])
    return ServerConfig(**args)
