"""The SGLang gather-then-cast patch, executed on CPU: a release's real FlashInfer MLA backend,
unpatched and patched, must give bit-identical decode outputs (the equivalence harness).

From the backend's source before and after a patch, this takes the decode path exactly as written
(`init_forward_metadata`, `FlashInferMLAIndicesUpdaterDecode.update` / `call_begin_forward`,
`forward_decode` and the patch's helpers) and runs it with the engine's CUDA-only pieces replaced by
plain-torch references: FlashInfer's `BatchMLAPagedAttentionWrapper` (plan + run, page size 1), the
triton kernel (0.5.9) or translator (0.5.23) that writes each request's KV slot ids, and
`device="cuda"` read as the CPU. The unpatched run casts the whole FP8 pool and plans on pool slot
ids; a right patch plans on 0..n-1 over the gathered rows and gives bit-identical outputs. A patch
that gathered the wrong rows, planned the wrong ids or cast the wrong buffer changes the outputs.

From 0.5.23's layout on (a backend with `init_forward_metadata_out_graph`), `check` also runs the
CUDA-graph decode and eager extend paths on paged KV (graph_paths.py) and says how in its line.

tests/sglang/test_patched_backend.py runs it on the playbook's stored patches; the eval's
`sglang-port` task (`check`, through the door tool in tools/sglang/porting.py) on a model's port.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch

from tools.sglang.paged import HEADS, RANK, ROPE, SCALE, ReferenceTranslator, decode_path


class ReferenceMLAWrapper:
    """BatchMLAPagedAttentionWrapper for page size 1 in plain torch: request i attends over rows
    kv_indices[kv_indptr[i]:kv_indptr[i+1]] of the buffers `run` is given."""

    def plan(self, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_len_arr: torch.Tensor, num_heads: int, head_dim_ckv: int,
             head_dim_kpe: int, page_size: int, causal: bool, sm_scale: float, q_data_type: Any,
             kv_data_type: Any) -> None:  # fmt: skip
        assert (num_heads, head_dim_ckv, head_dim_kpe, page_size, causal) == (HEADS, RANK, ROPE, 1, False)
        # FlashInfer copies the plan into its own buffers: the caller reuses kv_indptr.
        self.indptr, self.ids, self.scale = kv_indptr.clone(), kv_indices.clone(), sm_scale
        assert torch.equal(kv_len_arr, self.indptr[1:] - self.indptr[:-1])

    def run(
        self,
        q_nope: torch.Tensor,
        q_pe: torch.Tensor,
        ckv_cache: torch.Tensor,
        kpe_cache: torch.Tensor,
        out: torch.Tensor,
        return_lse: bool = False,
    ) -> torch.Tensor:
        assert not return_lse
        self.rows_given = ckv_cache.shape[0]
        for i in range(q_nope.shape[0]):
            rows = self.ids[self.indptr[i] : self.indptr[i + 1]].long()
            c, k = ckv_cache[rows, 0].float(), kpe_cache[rows, 0].float()
            logits = (q_nope[i].float() @ c.T + q_pe[i].float() @ k.T) * self.scale
            out[i] = (logits.softmax(-1) @ c).to(out.dtype)
        return out


class Decode:
    """Is a decode step (and not idle, extend or verify)."""

    def is_decode_or_idle(self) -> bool:
        return True

    def is_decode(self) -> bool:
        return True


def run_decode(
    names: dict[str, Any],
    pools: list[torch.Tensor],
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    qs: list[torch.Tensor],
) -> tuple[list[torch.Tensor], Any]:
    """One decode step over every layer through the backend's own methods; outputs and wrapper."""
    backend = object.__new__(names["FlashInferMLAAttnBackend"])
    updater = object.__new__(names["FlashInferMLAIndicesUpdaterDecode"])
    max_bs = 16
    updater.__dict__.update(
        num_local_heads=HEADS,
        kv_lora_rank=RANK,
        qk_nope_head_dim=128,
        qk_rope_head_dim=ROPE,
        scaling=SCALE,
        data_type=torch.bfloat16,
        attn_backend=backend,
        kv_indptr=torch.zeros(max_bs + 1, dtype=torch.int32),
        q_indptr=torch.arange(max_bs + 1, dtype=torch.int32),
        req_to_token=req_to_token,
    )
    kv_pool = SimpleNamespace(get_key_buffer=lambda layer_id: pools[layer_id])
    backend.__dict__.update(
        indices_updater_decode=updater,
        decode_wrapper=ReferenceMLAWrapper(),
        # What the patched __init__ sets: model_runner.kv_cache_dtype != model_runner.dtype.
        gather_kv_before_cast=pools[0].dtype != torch.bfloat16,
        kv_index_translator=ReferenceTranslator(req_to_token),
        token_to_kv_pool=kv_pool,  # 0.5.23 reads the pool from the backend
    )
    batch = SimpleNamespace(
        forward_mode=Decode(),
        req_pool_indices=req_pool_indices,
        seq_lens=seq_lens,
        seq_lens_sum=int(seq_lens.sum()),
        token_to_kv_pool=kv_pool,  # 0.5.9 reads it from the batch
        kv_loc_plan=None,
        spec_info=None,
        out_cache_loc=None,
    )
    backend.init_forward_metadata(batch)
    outs = []
    for layer_id, q in enumerate(qs):
        layer = SimpleNamespace(layer_id=layer_id, tp_q_head_num=HEADS, v_head_dim=RANK, head_dim=RANK + ROPE)
        outs.append(backend.forward_decode(q, None, None, layer, batch, save_kv_cache=False))
    return outs, backend


def case(
    seq_lens: list[int], pool_rows: int = 4096, layers: int = 2, seed: int = 0
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """FP8 pools (one per layer), requests whose slots are scattered over them, BF16 queries."""
    gen = torch.Generator().manual_seed(seed)
    pools = [
        (torch.randn(pool_rows, 1, RANK + ROPE, generator=gen) * 0.5).to(torch.float8_e4m3fn)
        for _ in range(layers)
    ]
    width = max(seq_lens) + 5
    slots = torch.randperm(pool_rows - 1, generator=gen)[: 8 * width].add(1).to(torch.int32)
    req_to_token = slots.view(8, width)  # 8 request rows; slot 0 is never used, as in sglang
    req_pool_indices = torch.randperm(8, generator=gen)[: len(seq_lens)]
    qs = [torch.randn(len(seq_lens), HEADS, RANK + ROPE, generator=gen).to(torch.bfloat16) for _ in pools]
    return pools, req_to_token, req_pool_indices, torch.tensor(seq_lens, dtype=torch.int32), qs


CASES = ([1], [7, 100, 3], [33] * 6)
"""Decode batches (sequence lengths) `check` runs: one request, uneven ones, a full batch."""


@contextmanager
def on_cpu() -> Iterator[None]:
    """A CPU build of torch raises on the CUDA capture query; on CPU nothing is being captured."""
    query = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing = query


def check(before: str, after: str, filename: str) -> tuple[bool, bool, str]:
    """Run the backend `before` and `after` a patch on `CASES`: (outputs bit-identical, the patched
    decode reads only the batch's rows, one line saying so); an exception of either run is raised."""
    upstream, patched = decode_path(before, f"upstream/{filename}"), decode_path(after, f"patched/{filename}")
    identical, active, differing = True, True, []
    with on_cpu():
        for lens in CASES:
            pools, req_to_token, req_pool_indices, seq_lens, qs = case(lens)
            expected, _ = run_decode(upstream, pools, req_to_token, req_pool_indices, seq_lens, qs)
            got, pb = run_decode(patched, pools, req_to_token, req_pool_indices, seq_lens, qs)
            if not all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)):
                identical = False
                differing.append(str(lens))
            active = active and pb.decode_wrapper.rows_given == sum(lens)
    line = (
        f"decode outputs bit-identical to the unpatched backend's on {len(CASES)} batch(es)"
        if identical
        else f"decode outputs differ from the unpatched backend's for batch(es) {', '.join(differing)}"
    )
    line += (
        "; the patched decode reads only the batch's KV rows"
        if active
        else "; the patched decode still reads the whole KV pool"
    )
    if "def init_forward_metadata_out_graph" in before:  # 0.5.23's layout: graph decode and extend too
        from tools.sglang.graph_paths import check_paths

        with on_cpu():
            same, more = check_paths(before, after, filename)
        identical, line = identical and same, f"eager {line}; {more}"
    return identical, active, line
