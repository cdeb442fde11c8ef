"""The equivalence harness beyond eager decode (sglang 0.5.23's layout on): CUDA-graph decode and
eager paged extend, each run through the backend's own methods unpatched and patched on paged KV.

- Graph decode: `init_cuda_graph_state`, then per captured batch size a capture
  (`init_forward_metadata_out_graph(in_capture=True)` and `forward_decode` of every layer, inside
  `Captured`: no host sync, no shape read off data), then replays of a changing batch, padded to the
  captured size as sglang's runner pads it: `init_forward_metadata_out_graph` (the replay's plan)
  and the layers' `forward_decode` again, which must hand the kernel the very shapes and buffers of
  the capture (a replay reruns the captured kernels on the captured addresses). Requests finish and
  their pages go to new requests between replays (a reused page), and two requests share a prefix
  whose last page is partly full (a shared tail page).
- Extend: an eager prefill on a cached prefix and a target_verify of speculative draft tokens
  (`init_forward_metadata`, `forward_extend`); draft_extend plans through the same branch.
Outputs must be bit-identical to the unpatched backend's; `check_paths` says which paths the patch
makes read only the batch's rows (a fixed number of them under a graph) instead of the cast pool.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import Any

import torch

from tools.sglang.paged import (
    HEADS,
    KEEP,
    RANK,
    ROPE,
    SCALE,
    Captured,
    PagedMLA,
    ReferenceTranslator,
    World,
    decode_path,
)

GRAPH_METHODS = {"init_cuda_graph_state", "init_forward_metadata_out_graph", "_apply_cuda_graph_metadata"}
PATCH_HELPERS = {"_graph_gather_width", "_graph_gather_ids", "_fill_graph_gather", "_gather_kv_in_extend"}
PATHS_KEEP: dict[str, set[str] | None] = {
    **KEEP,
    "FlashInferMLAAttnBackend": {*(KEEP["FlashInferMLAAttnBackend"] or ()), *GRAPH_METHODS, *PATCH_HELPERS, "forward_extend"},
    "PrefillMetadata": None,
    "FlashInferMLAIndicesUpdaterPrefill": {"update", "call_begin_forward"},
    "fast_mla_decode_plan": None,
}  # fmt: skip
CAPTURE_BS = (1, 2, 4, 8)
"""Batch sizes captured (sglang's list starts 1, 2, 4, 8, ...); 8 x context exceeds the pool at page
size 64 in `WORLDS`, so there the graph keeps the full-pool cast, as the patch decides."""
WORLDS = ((1, 1536, 160), (16, 96, 160), (64, 16, 160))
"""(page size, pages, context length) of the paged cases."""
FALSE = staticmethod(lambda *_a, **_k: False)


def compiled(source: str, filename: str) -> dict[str, Any]:
    """The backend's decode, graph and extend paths with the engine's CUDA-only pieces replaced."""
    more = {
        "partial": partial,
        "BatchMLAPagedAttentionWrapper": PagedMLA,
        "update_local_kv_lens_for_dcp": lambda kv_len_arr: None,  # no DCP: upstream returns at once
        "is_in_tc_piecewise_cuda_graph": lambda: False,
        "is_in_breakable_cuda_graph": lambda: False,
        "get_exec": lambda: SimpleNamespace(kernel=SimpleNamespace(flashinfer_mla_disable_ragged=False)),
        "SpecInput": Drafts,
    }
    return decode_path(source, filename, PATHS_KEEP, more)


class Drafts:
    """A speculative verify's spec_info: `draft` tokens per request past its seq_len, whose KV the
    verify wrote at req_to_token[row, seq_len:seq_len + draft] (generate_attn_arg_prefill)."""

    def __init__(self, draft: int, req_to_token: torch.Tensor) -> None:
        self.draft_token_num, self.req_to_token = draft, req_to_token

    def generate_attn_arg_prefill(
        self, *, req_pool_indices: torch.Tensor, paged_kernel_lens: torch.Tensor, **_: Any
    ) -> tuple:
        lens = paged_kernel_lens + self.draft_token_num
        kv_indptr = torch.cat([torch.zeros(1, dtype=torch.int32), lens.cumsum(0).to(torch.int32)])
        ids = [self.req_to_token[r, : int(n)] for r, n in zip(req_pool_indices.tolist(), lens, strict=True)]
        qo = torch.arange(lens.numel() + 1, dtype=torch.int32) * self.draft_token_num
        return torch.cat(ids), kv_indptr, qo, None  # fmt: skip


class Mode:
    """A forward mode: decode, extend (prefill) or target_verify."""

    def __init__(self, name: str) -> None:
        self.name = name

    def is_decode_or_idle(self) -> bool:
        return self.name == "decode"

    is_decode = is_decode_or_idle

    def is_target_verify(self) -> bool:
        return self.name == "verify"

    is_draft_extend_v2 = FALSE


def backend(names: dict[str, Any], world: World, max_bs: int = 8) -> Any:
    """A FlashInferMLAAttnBackend as its __init__ leaves it (the engine's objects replaced)."""
    b = object.__new__(names["FlashInferMLAAttnBackend"])
    b.__dict__.update(
        max_context_len=world.context, device="cpu", page_size=world.page, workspace_buffer=None,
        kv_indptr=torch.zeros(max_bs + 1, dtype=torch.int32), qo_indptr=torch.zeros(max_bs + 1, dtype=torch.int32),
        q_indptr_decode=torch.arange(max_bs + 1, dtype=torch.int32), token_to_kv_pool=world.kv_pool(),
        kv_index_translator=ReferenceTranslator(world.req_to_token), decode_wrapper=PagedMLA(),
        prefill_wrapper_paged=PagedMLA(), prefill_wrapper_verify=PagedMLA(), prefill_wrapper_ragged=None,
        gather_kv_before_cast=True, decode_cuda_graph_metadata={}, prefill_cuda_graph_metadata={},
        enable_chunk_kv=False, forward_metadata=None,
    )  # fmt: skip
    common = dict(num_local_heads=HEADS, kv_lora_rank=RANK, qk_nope_head_dim=128, qk_rope_head_dim=ROPE,
                  scaling=SCALE, data_type=torch.bfloat16, attn_backend=b, kv_indptr=b.kv_indptr)  # fmt: skip
    b.indices_updater_decode = object.__new__(names["FlashInferMLAIndicesUpdaterDecode"])
    b.indices_updater_decode.__dict__.update(
        common, q_indptr=b.q_indptr_decode, req_to_token=world.req_to_token
    )
    b.indices_updater_prefill = object.__new__(names["FlashInferMLAIndicesUpdaterPrefill"])
    b.indices_updater_prefill.__dict__.update(
        common,
        v_head_dim=RANK,
        q_data_type=torch.bfloat16,
        qo_indptr=b.qo_indptr,
        prefill_wrapper_ragged=None,
    )
    return b


def batch(mode: str, rows: list[int], lens: list[int], **more: Any) -> SimpleNamespace:
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    fields = dict(
        forward_mode=Mode(mode), req_pool_indices=torch.tensor(rows), seq_lens=seq_lens, seq_lens_cpu=seq_lens,
        seq_lens_sum=int(seq_lens.sum()), batch_size=len(rows), positions=torch.zeros(len(rows)),
        kv_loc_plan=None, spec_info=None, attn_dcp_metadata=None, attn_attend_prefix_cache=None,
    )  # fmt: skip
    return SimpleNamespace(**{**fields, **more})


def layers(
    b: Any, world: World, fb: SimpleNamespace, tokens: int, extend: bool = False
) -> list[torch.Tensor]:
    """Every layer's attention output for `tokens` query tokens (queries drawn from the world's seed)."""
    outs = []
    for layer_id in range(len(world.pools)):
        q = torch.randn(tokens, HEADS, RANK + ROPE, generator=world.gen).to(torch.bfloat16)
        layer = SimpleNamespace(layer_id=layer_id, tp_q_head_num=HEADS, v_head_dim=RANK, head_dim=RANK + ROPE,
                                logit_cap=0.0)  # fmt: skip
        run = b.forward_extend if extend else b.forward_decode
        outs.append(run(q, None, None, layer, fb, save_kv_cache=False))
    return outs


class GraphRun:
    """One backend's CUDA-graph decode: captures, then replays; what each replay handed the kernel."""

    def __init__(self, names: dict[str, Any], world: World) -> None:
        self.world, self.b, self.captured, self.ops = world, backend(names, world), {}, Captured()
        self.b.init_cuda_graph_state(max(CAPTURE_BS), max(CAPTURE_BS))
        for bs in reversed(CAPTURE_BS):  # as sglang: largest first, seq_lens 1 on request row 0
            fb = batch("decode", [0] * bs, [1] * bs)
            self.b.init_forward_metadata_out_graph(fb, in_capture=True)
            with self.ops:
                layers(self.b, world, fb, bs)
            self.captured[bs] = (self.b.forward_metadata, self.handed(bs))
        self.static, self.pool_rows = True, world.pools[0].shape[0]
        self.gathered: dict[int, int] = {}  # captured bs -> rows its last replay handed the kernel

    def handed(self, bs: int) -> tuple:
        """What the last run's layers handed the kernel: shapes, dtypes and buffer addresses."""
        rows = getattr(self.b.forward_metadata, "gathered_kv_indices", None)  # upstream: no such field
        seen = self.b.decode_cuda_graph_metadata[bs].seen[-len(self.world.pools) :]
        return (tuple(seen), None if rows is None else (tuple(rows.shape), rows.data_ptr()))

    def replay(self, rows: list[int], lens: list[int]) -> list[torch.Tensor]:
        """A decode step of these requests: padded to a captured size as sglang's runner pads (request
        row 0, length 1), planned by the replay path, run on the capture's metadata."""
        bs = next(c for c in CAPTURE_BS if c >= len(rows))
        fb = batch("decode", rows + [0] * (bs - len(rows)), lens + [1] * (bs - len(rows)))
        self.b.init_forward_metadata_out_graph(fb)
        self.b.forward_metadata = self.captured[bs][0]  # a replay reruns the captured kernels
        with self.ops:
            outs = layers(self.b, self.world, fb, bs)
        self.static = self.static and self.handed(bs) == self.captured[bs][1]
        self.gathered[bs] = self.b.decode_cuda_graph_metadata[bs].seen[-1][0][0]
        return outs


def graph_decode(
    names: dict[str, Any], page: int, pages: int, context: int
) -> tuple[list[torch.Tensor], GraphRun]:
    """Seven replays of a changing batch, every captured bs: a shared tail page (B forks A's first
    37 tokens), growth, a finished request whose pages go to a new one (reused pages), batches of 3,
    3, 3, 5, 4, 2 and 1 requests."""
    w = World(page, pages, context)
    run = GraphRun(names, w)
    w.admit(1, 70), w.admit(2, 90, share=(1, 37)), w.admit(3, 20)
    outs = run.replay([1, 2, 3], [70, 90, 20])
    w.grow(1, 71), w.grow(2, 91), w.grow(3, 21)
    outs += run.replay([1, 2, 3], [71, 91, 21])
    w.release(3), w.admit(4, 45)  # 4 gets 3's pages, rewritten
    outs += run.replay([1, 2, 4], [71, 91, 45])
    w.admit(5, 5), w.admit(6, 150)
    outs += run.replay([1, 2, 4, 5, 6], [71, 91, 45, 5, 150])
    w.release(5), w.grow(6, 151)
    outs += run.replay([1, 2, 4, 6], [71, 91, 45, 151])
    outs += run.replay([4, 6], [45, 151])
    outs += run.replay([6], [151])
    return outs, run


def extend(
    names: dict[str, Any], page: int, pages: int, context: int
) -> tuple[list[torch.Tensor], list[int]]:
    """An eager prefill on cached prefixes (one shares a tail page) and a target_verify of 3 draft
    tokens per request; the outputs and the rows each run handed the kernel."""
    w = World(page, pages, context, seed=1)
    b = backend(names, w)
    w.admit(1, 70), w.admit(2, 90, share=(1, 37)), w.admit(3, 20)
    prefix = [60, 85, 0]
    fb = batch(
        "extend",
        [1, 2, 3],
        [70, 90, 20],
        extend_prefix_lens=torch.tensor(prefix),
        extend_prefix_lens_cpu=prefix,
    )
    b.init_forward_metadata(fb)
    outs = layers(b, w, fb, 35, extend=True)
    w.grow(1, 73), w.grow(2, 93)  # the drafts' KV, written by the verify's own forward
    fb = batch("verify", [1, 2], [70, 90], spec_info=Drafts(3, w.req_to_token))
    b.init_forward_metadata(fb)
    outs += layers(b, w, fb, 6, extend=True)
    return outs, [b.prefill_wrapper_paged.seen[-1][0][0], b.prefill_wrapper_verify.seen[-1][0][0]]


def check_paths(before: str, after: str, filename: str) -> tuple[bool, str]:
    """Graph decode and extend, unpatched and patched, on every world: (all outputs bit-identical,
    one line per path saying what the patched backend reads)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: one thread is several times faster on a busy machine
    try:
        return _check_paths(before, after, filename)
    finally:
        torch.set_num_threads(threads)


def _check_paths(before: str, after: str, filename: str) -> tuple[bool, str]:
    up, patched = compiled(before, f"upstream/{filename}"), compiled(after, f"patched/{filename}")
    same = {"graph decode": True, "extend": True}
    gathered, replayed, static, clean, extend_rows = 0, 0, True, True, True
    for page, pages, context in WORLDS:
        want, _ = graph_decode(up, page, pages, context)
        got, run = graph_decode(patched, page, pages, context)
        same["graph decode"] &= all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        static, clean = static and run.static, clean and not run.ops.refused
        gathered += sum(rows < run.pool_rows for rows in run.gathered.values())
        replayed += len(run.gathered)
        want, _ = extend(up, page, pages, context)
        got, rows = extend(patched, page, pages, context)
        same["extend"] &= all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        extend_rows &= rows == [70 + 90 + 20, 73 + 93]
    graph = (
        f"gathers a fixed width per captured bs where it is below the pool ({gathered} of {replayed} "
        "(page size, bs) replayed)"
        if gathered
        else "keeps the full-pool cast"
    )
    graph += (
        "; one set of shapes and buffers over every replay" if static else "; shapes change between replays"
    )
    graph += (
        "; no host sync in the captured path"
        if clean
        else "; a host sync or data-shaped op in the captured path"
    )
    ext = "reads only the batch's KV rows" if extend_rows else "casts the whole KV pool"
    sizes = "/".join(str(w[0]) for w in WORLDS)
    line = "; ".join(
        f"{path} (page sizes {sizes}): outputs {'bit-identical' if same[path] else 'DIFFER'}, {what}"
        for path, what in (("graph decode", graph), ("extend", ext))
    )
    return all(same.values()), line
