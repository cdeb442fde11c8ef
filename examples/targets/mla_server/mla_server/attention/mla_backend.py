"""MLA attention over the latent KV pool (absorbed form: keys and values are the latent rows)."""

import torch

from mla_server.kv_pool import KV_LORA_RANK, MLATokenToKVPool


class MLAAttentionBackend:
    """Decode and extend attention for MLA over an FP8 latent KV pool.

    Queries are `[tokens, heads, 576]` (latent + rope); a slot's 576-dim row is the key and its
    first 512 dims are the value. Outputs are `[tokens, heads, 512]` in the latent space.
    """

    def __init__(self, kv_pool: MLATokenToKVPool, scaling: float):
        self.kv_pool = kv_pool
        self.scaling = scaling

    def forward_decode(self, q, k, layer_id, batch):
        """One new token per request: store its KV, then attend over the request's slots.

        q: `[padded_batch, heads, 576]`; k: `[padded_batch, 576]` new latent rows; only the first
        `len(batch.kv_indices)` rows are real requests, the rest is padding.
        """
        real = len(batch.kv_indices)
        self.kv_pool.set_kv_buffer(layer_id, batch.out_cache_loc, k[:real])
        k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)
        out = q.new_zeros(q.shape[0], q.shape[1], KV_LORA_RANK)
        for i, kv_indices in enumerate(batch.kv_indices):
            out[i] = self._attend(q[i : i + 1], k_buffer[kv_indices], causal=False)[0]
        return out

    def forward_extend(self, q, k, layer_id, kv_indices):
        """Prefill one request: store the prompt's KV rows, then causal attention over them."""
        self.kv_pool.set_kv_buffer(layer_id, kv_indices, k)
        kv = self.kv_pool.get_key_buffer(layer_id)[kv_indices].to(q.dtype)
        return self._attend(q, kv, causal=True)

    def _attend(self, q, kv, causal):
        """Softmax attention of q `[t, heads, 576]` over kv rows `[s, 1, 576]` (last t are q's)."""
        keys = kv.squeeze(1)
        scores = torch.matmul(q.transpose(0, 1), keys.t()).float() * self.scaling  # [h, t, s]
        if causal:
            t, s = q.shape[0], keys.shape[0]
            mask = torch.ones(t, s, dtype=torch.bool, device=q.device).triu(s - t + 1)
            scores.masked_fill_(mask, float("-inf"))
        probs = scores.softmax(dim=-1).to(q.dtype)
        return torch.matmul(probs, keys[:, :KV_LORA_RANK]).transpose(0, 1)  # [t, h, 512]

    def forward_decode_static(self, q, k, layer_id, batch):
        """Static-shape decode (CUDA-graph capturable): every row stores its new KV row (padding
        rows at the pool's padding slot), then attends over `batch.kv_indices` `[bs, width]`,
        masked past the row's position.

        q: `[bs, heads, 576]`; k: `[bs, 576]`; returns `[bs, heads, 512]`.
        """
        self.kv_pool.set_kv_buffer(layer_id, batch.out_cache_loc, k)
        k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)
        kv = k_buffer[batch.kv_indices]
        return self._attend_masked(q, kv.squeeze(2), batch.kv_mask)

    def _attend_masked(self, q, keys, mask):
        """Per row: q `[bs, heads, 576]` over keys `[bs, width, 576]` where mask `[bs, width]`."""
        scores = torch.matmul(q, keys.transpose(1, 2)).float().mul(self.scaling)  # [bs, h, width]
        scores.masked_fill_(~mask.unsqueeze(1), float("-inf"))
        probs = scores.softmax(dim=-1).to(q.dtype)
        return torch.matmul(probs, keys[..., :KV_LORA_RANK])  # [bs, h, 512]
