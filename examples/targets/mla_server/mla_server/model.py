"""A random-weight MLA + MoE transformer (DeepSeek/GLM-5 shaped, small sizes).

Weights come from a fixed seed, so the same config always builds the same model.
"""

import dataclasses
from dataclasses import dataclass

import torch

from mla_server import tp
from mla_server.tp import functional as F  # torch's, with `linear` summing partial outputs over ranks
from mla_server.config import ServerConfig
from mla_server.kv_pool import KV_CACHE_DIM, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from mla_server.tokenizer import VOCAB_SIZE

DTYPE = torch.bfloat16
ROPE_THETA = 10000.0


@dataclass
class LayerWeights:
    """One decoder layer: MLA projections and a top-k routed mixture of SwiGLU experts."""

    attn_norm: torch.Tensor
    q_proj: torch.Tensor  # [heads * 576, hidden]
    kv_proj: torch.Tensor  # [576, hidden]
    kv_norm: torch.Tensor
    o_proj: torch.Tensor  # [hidden, heads * 512]
    mlp_norm: torch.Tensor
    router: torch.Tensor  # [experts, hidden]
    gate_up: torch.Tensor  # [experts * 2 * ffn, hidden]
    down: torch.Tensor  # [hidden, experts * ffn]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm computed in float32."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


class MLAModel:
    """Weights and per-layer math; attention itself is delegated to an attention callable."""

    def __init__(self, cfg: ServerConfig):
        # Weights are drawn at full size (the same as at TP1), then this rank keeps its shard
        # (mla_server/tp.py); the layer math sees this rank's heads and ffn, and F.linear sums the
        # partial outputs of o_proj and down (sharded along their input dim) over the ranks.
        self.full_cfg = cfg
        self.cfg = dataclasses.replace(cfg, heads=cfg.heads // tp.world(), ffn=cfg.ffn // tp.world())
        self.device = torch.device(cfg.device)
        self.dtype = torch.float32 if cfg.dtype == "float32" else DTYPE  # the weights stay bf16-valued
        gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.embed = self._rand(gen, (VOCAB_SIZE, cfg.hidden), 1.0)
        self.layers = [self._layer(gen) for _ in range(cfg.layers)]
        self.final_norm = torch.ones(cfg.hidden, dtype=self.dtype, device=self.device)
        self.lm_head = self._rand(gen, (VOCAB_SIZE, cfg.hidden), cfg.hidden**-0.5)
        self.cos, self.sin = self._rope_table(cfg.context_len)

    def _rand(self, gen, shape, scale):
        t = torch.randn(shape, generator=gen, device=self.device, dtype=torch.float32)
        return (t * scale).to(DTYPE).to(self.dtype)

    def _layer(self, gen) -> LayerWeights:
        c, ones = self.full_cfg, (lambda n: torch.ones(n, dtype=self.dtype, device=self.device))
        return LayerWeights(
            attn_norm=ones(c.hidden),
            q_proj=tp.shard(self._rand(gen, (c.heads * KV_CACHE_DIM, c.hidden), c.hidden**-0.5), 0),
            kv_proj=self._rand(gen, (KV_CACHE_DIM, c.hidden), c.hidden**-0.5),
            kv_norm=ones(KV_LORA_RANK),
            o_proj=tp.shard(self._rand(gen, (c.hidden, c.heads * KV_LORA_RANK), (c.heads * KV_LORA_RANK) ** -0.5), 1,
                            partial=True),
            mlp_norm=ones(c.hidden),
            router=self._rand(gen, (c.experts, c.hidden), c.hidden**-0.5),
            gate_up=tp.shard(self._rand(gen, (c.experts * 2 * c.ffn, c.hidden), c.hidden**-0.5), 0, c.experts * 2),
            down=tp.shard(self._rand(gen, (c.hidden, c.experts * c.ffn), c.ffn**-0.5), 1, c.experts, partial=True),
        )

    def _rope_table(self, length: int):
        inv = 1.0 / ROPE_THETA ** (torch.arange(0, QK_ROPE_HEAD_DIM, 2, device=self.device) / QK_ROPE_HEAD_DIM)
        freqs = torch.outer(torch.arange(length, device=self.device, dtype=torch.float32), inv)
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotary embedding on the last dim of x `[tokens, ..., 64]`."""
        shape = (positions.shape[0],) + (1,) * (x.dim() - 2) + (QK_ROPE_HEAD_DIM,)
        cos, sin = self.cos[positions].view(shape), self.sin[positions].view(shape)
        half = QK_ROPE_HEAD_DIM // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def layer_forward(self, layer_id: int, h: torch.Tensor, positions: torch.Tensor, attend):
        """Run one decoder layer on hidden states h `[tokens, hidden]`.

        `attend(q, k, layer_id)` stores the new latent rows k and returns `[tokens, heads, 512]`.
        """
        w, n = self.layers[layer_id], h.shape[0]
        x = rms_norm(h, w.attn_norm)
        q = F.linear(x, w.q_proj).view(n, self.cfg.heads, KV_CACHE_DIM)
        kv = F.linear(x, w.kv_proj)
        q = torch.cat([q[..., :KV_LORA_RANK], self._rope(q[..., KV_LORA_RANK:], positions)], dim=-1)
        k = torch.cat([rms_norm(kv[:, :KV_LORA_RANK], w.kv_norm),
                       self._rope(kv[:, KV_LORA_RANK:], positions)], dim=-1)
        attn = attend(q, k, layer_id)
        h = h + F.linear(attn.reshape(n, -1), w.o_proj)
        return h + self._moe(rms_norm(h, w.mlp_norm), w)

    def _moe(self, x: torch.Tensor, w: LayerWeights) -> torch.Tensor:
        """Top-k routed SwiGLU experts, computed densely as two matmuls over all experts.

        Unselected experts get routing weight 0, so the sum equals the top-k mixture.
        """
        c, n = self.cfg, x.shape[0]
        scores = F.linear(x, w.router).float().softmax(dim=-1)
        top, idx = scores.topk(c.top_k, dim=-1)
        gates = torch.zeros_like(scores).scatter_(-1, idx, top / top.sum(-1, keepdim=True))
        gate, up = F.linear(x, w.gate_up).view(n, c.experts, 2 * c.ffn).chunk(2, dim=-1)
        act = F.silu(gate) * up * gates.to(x.dtype).unsqueeze(-1)  # [tokens, experts, ffn]
        return F.linear(act.reshape(n, -1), w.down)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Float32 logits `[tokens, vocab]`."""
        return F.linear(rms_norm(h, self.final_norm), self.lm_head).float()
