"""Runs the model: prefill (forward_extend) and batched decode (forward_decode) with sampling."""

import functools
from dataclasses import dataclass

import torch

from mla_server.attention.mla_backend import MLAAttentionBackend
from mla_server.compile import CompiledDecode
from mla_server.config import ServerConfig
from mla_server.cuda_graph_runner import CudaGraphRunner, StaticDecodeBatch
from mla_server.kv_pool import KV_CACHE_DIM, MLATokenToKVPool
from mla_server.model import MLAModel
from mla_server.tokenizer import PRINTABLE_FIRST, PRINTABLE_LAST


@dataclass
class DecodeBatch:
    """One decode step: a new token per request, padded to a fixed batch size.

    Padding to `max_running` rows keeps every matmul the same shape whatever the batch holds, so
    a request's output never depends on the other requests in the batch.
    """

    reqs: list  # the real requests (rows 0..len-1); rows after them are padding
    input_ids: torch.Tensor  # [padded]
    positions: torch.Tensor  # [padded]
    out_cache_loc: torch.Tensor  # [real] slot of each request's new token
    kv_indices: list  # per request: its slots 0..position (inclusive)


def sample(logits: torch.Tensor, reqs: list) -> list[int]:
    """Greedy (temperature 0) or temperature sampling, restricted to printable ASCII ids; a request
    that wants logprobs gets its token's and the top `score_top` (over the printable ids)."""
    printable = logits[:, PRINTABLE_FIRST : PRINTABLE_LAST + 1].cpu()
    tokens = []
    for row, req in zip(printable, reqs):
        if req.temperature == 0:
            choice = int(row.argmax())
        else:
            probs = (row / req.temperature).softmax(dim=-1)
            choice = int(torch.multinomial(probs, 1, generator=req.generator))
        tokens.append(PRINTABLE_FIRST + choice)
        if getattr(req, "want_logprobs", False):
            logprobs = row.float().log_softmax(dim=-1)
            values, ids = logprobs.topk(min(req.score_top, logprobs.numel()))
            top = [(PRINTABLE_FIRST + i, v) for i, v in zip(ids.tolist(), values.tolist())]
            req.token_logprobs.append((float(logprobs[choice]), top))
    return tokens


class ModelRunner:
    """Owns the model, the KV pool, the attention backend and, on cuda, the static decode step
    with its CUDA graphs (`graph_runner`; None on cpu, whose decode stays eager and per request);
    under --enable-torch-compile the compiled decode (`compiled`, mla_server/compile.py).
    """

    def __init__(self, cfg: ServerConfig, static_decode: bool | None = None):
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        self.model = MLAModel(cfg)
        static = cfg.static_decode if static_decode is None else static_decode
        self.kv_pool = MLATokenToKVPool(cfg.pool_slots, cfg.layers, cfg.device, padding_slot=static)
        self.attn_backend = MLAAttentionBackend(self.kv_pool, KV_CACHE_DIM**-0.5)
        self.graph_runner = CudaGraphRunner(self, cfg, capture=False) if static else None
        self.compiled = CompiledDecode(self, cfg.torch_compile_max_bs) if cfg.enable_torch_compile else None
        if self.compiled is not None:  # compiled now, so a start-up timed to healthy includes it
            self.compiled.warm_up(self)
        if self.graph_runner is not None and cfg.use_cuda_graph:
            self.graph_runner.capture()  # after the compile: the graphs replay the compiled kernels

    def forward_extend(self, req) -> int:
        """Prefill one request's prompt into its slots; return its first sampled token."""
        h = self._extend_hidden(req)
        return sample(self.model.logits(h[-1:]), [req])[0]

    def forward_score(self, req, top: int) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """Prefill the prompt and score it (an echo request): for each token after the first, its
        log-probability given the tokens before it and the `top` most likely ids there."""
        h = self._extend_hidden(req)
        logprobs = torch.log_softmax(self.model.logits(h[:-1]), dim=-1).cpu()  # row i predicts i+1
        following = torch.tensor(req.prompt_ids[1:], dtype=torch.long)
        own = logprobs.gather(1, following.unsqueeze(1)).squeeze(1).tolist()
        values, ids = logprobs.topk(top, dim=-1)
        alts = [list(zip(i, v)) for i, v in zip(ids.tolist(), values.tolist())]
        return own, alts

    def _extend_hidden(self, req) -> torch.Tensor:
        """The last layer's hidden states `[prompt, hidden]`, the prompt's KV rows stored."""
        n = len(req.prompt_ids)
        ids = torch.tensor(req.prompt_ids, device=self.device)
        positions = torch.arange(n, device=self.device)
        kv_indices = req.slots_device[:n]
        attend = functools.partial(self.attn_backend.forward_extend, kv_indices=kv_indices)
        return self.run_layers(self.model.embed[ids], positions, attend)

    def build_decode_batch(self, reqs: list) -> DecodeBatch:
        """Tensors for one decode step of `reqs` (each has a last token and a position)."""
        if self.graph_runner is not None:
            return self.graph_runner.build(reqs)
        pad = self.cfg.max_running - len(reqs)
        ids = [r.last_token_id for r in reqs] + [0] * pad
        positions = [r.position for r in reqs] + [0] * pad
        return DecodeBatch(
            reqs=reqs,
            input_ids=torch.tensor(ids, device=self.device),
            positions=torch.tensor(positions, device=self.device),
            out_cache_loc=torch.tensor([r.slots[r.position] for r in reqs], device=self.device),
            kv_indices=[r.slots_device[: r.position + 1] for r in reqs],
        )

    def forward_decode(self, batch):
        """One decode step for the whole batch: all layers, then sampling; returns token ids."""
        if isinstance(batch, StaticDecodeBatch):  # cuda: a graph replay, or the same step eagerly
            return sample(self.graph_runner.forward(batch)[: len(batch.reqs)], batch.reqs)
        attend = functools.partial(self.attn_backend.forward_decode, batch=batch)
        h = self.run_layers(self.model.embed[batch.input_ids], batch.positions, attend, decode=True)
        return sample(self.model.logits(h)[: len(batch.reqs)], batch.reqs)

    def run_layers(self, h, positions, attend, decode: bool = False):
        """Every layer on h `[tokens, hidden]`; a decode step runs the compiled layer math under
        --enable-torch-compile (up to --torch-compile-max-bs rows), prefill always eager."""
        if decode and self.compiled is not None and self.compiled.covers(h.shape[0]):
            return self.compiled.run_layers(h, positions, attend)
        for layer_id in range(self.cfg.layers):
            h = self.model.layer_forward(layer_id, h, positions, attend)
        return h
