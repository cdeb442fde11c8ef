"""The embedded demo server (`kind = "mla_server"`, examples/targets/mla_server) as an engine.

Its launch flags are its own argparse's (examples/targets/mla_server/mla_server/config.py), among
them SGLang's compile path (`--enable-torch-compile`, `--torch-compile-max-bs`: exact by default,
its compile timed inside the launch, mla_server/compile.py); the
target file's `[profile] model_runner_path` names where the dormant profiler goes; it states its
context limit in `/get_server_info` and `/v1/models`; it has no serving benchmark of its own.
"""

from __future__ import annotations

from state.measurement.floor import ModelFootprint
from tools.engines.contract import Engine

PRESETS = {
    "cpu": {"layers": 4, "heads": 4, "hidden": 256, "experts": 4, "ffn": 256},
    "glm5": {"layers": 78, "heads": 16, "hidden": 2048, "experts": 8, "ffn": 1024},
}
"""The model sizes of the demo server's presets (mla_server/config.py `PRESETS`; a test holds them equal)."""
VOCAB, LATENT, ROPE = 256, 512, 64
"""Its tokenizer's vocabulary, and its MLA latent and rope dims (a KV row holds both: 576 bytes, FP8)."""


def model_sizes(argv: list[str]) -> dict[str, int | str]:
    """The demo server's preset and model sizes as its flags in `argv` set them (`--x V` or
    `--x=V`), the last of a flag winning as in argparse, the preset's where none is given (pure)."""
    sizes: dict[str, int | str] = {"preset": "cpu", "tp_size": 1}
    for i, word in enumerate(argv):
        name, eq, inline = word.partition("=")
        key = name.removeprefix("--").replace("-", "_")
        value = inline if eq else argv[i + 1] if i + 1 < len(argv) else ""
        if not name.startswith("--"):
            continue
        if key == "preset":
            sizes["preset"] = value
        elif key in (*PRESETS["cpu"], "tp_size") and value.isdigit():
            sizes[key] = int(value)
    return {**PRESETS.get(str(sizes["preset"]), PRESETS["cpu"]), **sizes}


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
    precise = ("--dtype", "float32")  # the same bfloat16 weights, upcast exactly
    precise_small = ("--max-total-tokens", "16384")  # glm5: 0.7 GB of pool, not 22 GB (78 layers)

    def footprint(self, argv: list[str]) -> ModelFootprint | None:
        """Its random-weight MLA + MoE model (mla_server/model.py) from the preset and size flags:
        BF16 weights, every expert read each step (it computes them densely), the embedding's few
        rows left out; an FP8 KV row of 576 bytes per layer."""
        z = model_sizes(argv)
        if z["preset"] not in PRESETS:
            return None
        layers, heads, hidden, experts, ffn, tp = (
            int(z[k]) for k in ("layers", "heads", "hidden", "experts", "ffn", "tp_size")
        )
        row = LATENT + ROPE
        layer = (
            heads * row * hidden  # q_proj
            + row * hidden  # kv_proj
            + hidden * heads * LATENT  # o_proj
            + experts * hidden  # router
            + 3 * experts * ffn * hidden  # gate_up, down
            + 2 * hidden  # attn_norm, mlp_norm
            + LATENT  # kv_norm
        )
        return ModelFootprint(
            weight_bytes=2 * (layers * layer + VOCAB * hidden + hidden),  # + lm_head, final_norm
            kv_bytes_per_token=row * layers,
            gpus=tp,
            basis=(
                f"mla_server {z['preset']} preset: {layers} layers, hidden {hidden}, {heads} heads, "
                f"{experts} experts x ffn {ffn} (all read each step), BF16 weights, FP8 KV {row} B/token/layer"
            ),
        )
