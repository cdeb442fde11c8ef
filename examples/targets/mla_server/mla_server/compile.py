"""`--enable-torch-compile` (SGLang's launch option): decode through torch.compile'd layer math.

What is compiled: each decode layer, `MLAModel.layer_forward` as it stands (norm, q/kv projections,
rope; then o_proj, norm, the MoE), with the layer's weights as inputs, so one compiled function
serves every layer (`CompiledDecode`); the attention call inside it is a graph break. On the static
step (cuda) the masked attention over the gathered rows is compiled too
(`MLAAttentionBackend._attend_masked`). The KV pool's read (and its cast, until the cast fix)
stays eager, outside the compiled code. Prefill and decode batches over `--torch-compile-max-bs`
run the eager methods. Shapes are static (`dynamic=False`): one compile per decode batch size, as
SGLang compiles per captured size.

Exact: inductor otherwise keeps intermediates in float32 where eager rounds them to bfloat16 (on the
glm5 preset on an H200 that moved a logit by 0.52 and changed a greedy token). `exact_numerics()`
sets `emulate_precision_casts` (which also turns off Triton's FMA contraction), eager's division
rounding and no flush-to-zero, and keeps fast-math off; logits then matched eager's bit for bit there
and on the CPU tests. The settings it made are logged and listed in /get_server_info.

Start-up compiles and warms up every compiled batch size before the server says it is ready (before
the CUDA graphs capture the compiled kernels), so a launcher timing start-up to healthy measures
the compile; the server reports its own share as `torch_compile_s` in /get_server_info.
"""

import copy
import logging
import time

import torch

log = logging.getLogger("mla_server")

EXACT = {
    "emulate_precision_casts": True,  # round where eager rounds (and no FMA contraction in Triton)
    "pattern_matcher": False,  # no rewrites such as `h + x @ W.T` into one addmm (rounds once, not twice)
    "use_fast_math": False,  # Triton: no flush-to-zero exp
    "eager_numerics.division_rounding": True,  # Triton: x / y rounded as eager's, not approximated
    "eager_numerics.disable_ftz": True,  # Triton: denormals kept, as eager keeps them
    "cpp.enable_unsafe_math_opt_flag": False,  # C++ (cpu): no -funsafe-math-optimizations
    "cpp.enable_floating_point_contract_flag": "off",  # C++ (cpu): no FMA contraction
}
"""Inductor settings that keep compiled decode's numerics those of eager decode; a name this torch
does not have is skipped (and not listed as set)."""


def exact_numerics() -> list[str]:
    """Set the `EXACT` settings this torch has; return them as `name=value`."""
    import torch._inductor.config as inductor

    made = []
    for name, value in EXACT.items():
        *path, leaf = name.split(".")
        owner = inductor
        for part in path:
            owner = getattr(owner, part, None)
        if owner is None or not hasattr(owner, leaf):
            continue
        setattr(owner, leaf, value)
        made.append(f"{name}={value}")
    return made


class _Attend:
    """The attention of the step being run, called from compiled code as a graph break: attention
    and the KV pool (its read, and the cast until the cast fix) stay eager; the layer's real index
    is set here because the compiled layer sees every layer as layer 0 of its view."""

    def __init__(self):
        self.attend, self.layer_id = None, 0
        # disabled here, not by a decorator on the class: torch._dynamo (~2 s to import on a CPU)
        # is then imported only by a server that compiles, not by every server's start-up
        self._eager = torch._dynamo.disable(self._attend)

    def _attend(self, q, k, _layer_id):
        return self.attend(q, k, self.layer_id)

    def __call__(self, q, k, layer_id):
        return self._eager(q, k, layer_id)


def _layer(view, h, positions, attend):
    """One layer as `MLAModel.layer_forward` runs it, on a view holding that layer's weights alone."""
    return view.layer_forward(0, h, positions, attend)


class CompiledDecode:
    """Decode's compiled layers (and the static step's attention) and when decode uses them.

    Every layer runs `MLAModel.layer_forward` itself (the model's code, patched or not), compiled
    once for all layers: each layer is a shallow copy of the model whose `layers` holds that layer's
    weights alone, so the weights are inputs of one compiled function rather than constants of 78.
    """

    def __init__(self, runner, max_bs: int):
        self.max_bs = max_bs
        self.settings = exact_numerics()
        gr = runner.graph_runner
        sizes = sorted({*gr.batch_sizes, gr.max_bs}) if gr is not None else [runner.cfg.max_running]
        self.batch_sizes = [bs for bs in sizes if bs <= max_bs]
        # one compile per batch size and side of the attention call (`cache_size_limit`: older name)
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(8, 2 * len(sizes) + 2))
        model, backend = runner.model, runner.attn_backend
        self.views = []
        for w in model.layers:
            view = copy.copy(model)
            view.layers = [w]
            self.views.append(view)
        self.layer = torch.compile(_layer, dynamic=False)
        self.attend = _Attend()
        eager_attend = backend._attend_masked
        compiled_attend = torch.compile(eager_attend, dynamic=False)

        def attend_masked(q, keys, mask):
            return (compiled_attend if q.shape[0] <= max_bs else eager_attend)(q, keys, mask)

        backend._attend_masked = attend_masked  # the static step's only caller
        self.compile_s = 0.0

    def covers(self, rows: int) -> bool:
        """Whether a decode batch of `rows` runs compiled (up to --torch-compile-max-bs)."""
        return rows <= self.max_bs

    def run_layers(self, h, positions, attend):
        """Every layer, compiled, on the decode batch h `[rows, hidden]`."""
        self.attend.attend = attend
        for layer_id, view in enumerate(self.views):
            self.attend.layer_id = layer_id
            h = self.layer(view, h, positions, self.attend)
        return h

    def warm_up(self, runner) -> None:
        """Compile every batch size now (start-up), timed in `compile_s`."""
        started = time.monotonic()
        gr = runner.graph_runner
        for bs in self.batch_sizes:
            if gr is not None:  # the static step on padding rows: writes only the padding slot
                gr.step(gr.build([], bs))
            else:  # cpu: the per-request decode's padded rows; attention (eager, per request) aside
                zeros = runner.model.embed.new_zeros(bs, runner.cfg.hidden)
                positions = torch.zeros(bs, dtype=torch.long, device=runner.device)
                self.run_layers(zeros, positions, lambda q, k, layer_id: q.new_zeros(*q.shape[:2], 512))
        if runner.device.type == "cuda":
            torch.cuda.synchronize()
        self.compile_s = time.monotonic() - started
        log.info("torch.compile: decode batch sizes %s compiled and warmed up in %.1f s (exact: %s)",
                 self.batch_sizes, self.compile_s, ", ".join(self.settings))
