"""The playbook's gather-then-cast, as arithmetic: same attention outputs as casting the whole pool.

The SGLang patch plans FlashInfer's MLA wrapper on ids 0..n-1 and hands it the pool rows
kv_indices[0..n-1] gathered, then cast. A reference paged MLA decode (what the wrapper computes:
request i attends over rows ids[indptr[i]:indptr[i+1]] of the buffer it is given) must give
bit-identical outputs either way. The cuda variant runs only with -m gpu.
"""

import pytest
import torch

HEADS, RANK, ROPE = 4, 512, 64  # GLM-5/DeepSeek MLA widths: 512 latent + 64 rope = 576


def paged_mla_decode(q_nope, q_rope, ckv, kpe, indptr, ids, scale):
    """Reference of BatchMLAPagedAttentionWrapper.run for page size 1 (one query token per request)."""
    out = torch.empty_like(q_nope)
    for i in range(q_nope.shape[0]):
        rows = ids[indptr[i] : indptr[i + 1]].long()
        c, k = ckv[rows, 0].float(), kpe[rows, 0].float()  # [n, RANK], [n, ROPE]
        logits = (q_nope[i].float() @ c.T + q_rope[i].float() @ k.T) * scale  # [HEADS, n]
        out[i] = (logits.softmax(-1) @ c).to(out.dtype)
    return out


def case(device: str, pool_rows: int, seq_lens: list[int], seed: int = 0):
    """An FP8 pool, a batch of requests scattered over it, and BF16 queries."""
    gen = torch.Generator().manual_seed(seed)
    pool = (torch.randn(pool_rows, 1, RANK + ROPE, generator=gen) * 0.5).to(torch.float8_e4m3fn).to(device)
    ids = torch.randperm(pool_rows - 1, generator=gen)[: sum(seq_lens)].add(1).to(torch.int32).to(device)
    indptr = torch.tensor([0, *seq_lens], dtype=torch.int32).cumsum(0).tolist()
    q = torch.randn(len(seq_lens), HEADS, RANK + ROPE, generator=gen).to(torch.bfloat16).to(device)
    return pool, ids, indptr, q[..., :RANK], q[..., RANK:]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("seq_lens", [[1], [7, 100, 3], [64] * 8])
def test_gather_then_cast_equals_full_cast_then_index(device, seq_lens):
    pool, ids, indptr, q_nope, q_rope = case(device, 4096, seq_lens)
    full = pool.to(torch.bfloat16)  # upstream: the whole pool, every layer, every step
    expected = paged_mla_decode(q_nope, q_rope, full[..., :RANK], full[..., RANK:], indptr, ids, 0.1)
    gathered = pool.index_select(0, ids).to(torch.bfloat16)  # the patch: only the planned rows
    seq = torch.arange(ids.numel(), dtype=torch.int32, device=device)  # planned ids 0..n-1
    got = paged_mla_decode(q_nope, q_rope, gathered[..., :RANK], gathered[..., RANK:], indptr, seq, 0.1)
    assert gathered.shape == (sum(seq_lens), 1, RANK + ROPE)
    assert torch.equal(gathered, full[ids.long()]) and torch.equal(got, expected)
