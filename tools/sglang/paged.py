"""The equivalence harness's backend compiler and plain-torch stand-ins: `decode_path` compiles the
kept classes and functions of a backend's source with the engine's CUDA-only pieces replaced
(equivalence.py, graph_paths.py); for the graph and extend paths (graph_paths.py), a paged KV world (pages of 1, 16 or 64 slots, shared and reused pages) and FlashInfer's MLA wrapper
as the kernel reads it, eager or captured in a CUDA graph.

SGLang's FlashInfer MLA backend plans its kernel at page size 1 whatever the server's page size:
`req_to_token` holds token slots, and a page of P slots holds P consecutive ones. So a world with
page size P gives each request a page table (page p -> slots p*P .. p*P+P-1), and sharing a page
(a forked prefix whose last page is only partly full: a shared tail page) or handing a freed page
to a new request (a reused page, rewritten) is what the backend's kv_indices then carry.
"""

from __future__ import annotations
import __future__

import ast
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

HEADS, RANK, ROPE, SCALE = 4, 512, 64, 0.1
DATA_DEPENDENT: tuple[str, ...] = (
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
)
DATA_DEPENDENT += ("aten::_unique", "aten::repeat_interleave", "aten::masked_scatter")
"""Operators with a host sync or an output shape read off data: none may run in a captured path."""


KEEP = {
    "DecodeMetadata": None,  # the whole dataclass
    "FlashInferMLAAttnBackend": {
        "init_forward_metadata",
        "forward_decode",
        "_gather_kv_in_decode",
        "_decode_kv_buffer",
    },
    "FlashInferMLAIndicesUpdaterDecode": {"update", "call_begin_forward"},
}


def fill_kv_indices(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    indptr: torch.Tensor,
    out: torch.Tensor,
    kv_start_idx: torch.Tensor | None = None,
) -> bool:
    """What sglang's kv-index triton kernel / translator writes: each request's slots, in order."""
    for i in range(int(seq_lens.numel())):
        start, n = (0 if kv_start_idx is None else int(kv_start_idx[i])), int(seq_lens[i])
        out[int(indptr[i]) : int(indptr[i]) + n] = req_to_token[req_pool_indices[i], start : start + n]
    return True


class ReferenceKvIndicesKernel:
    """`create_flashinfer_kv_indices_triton[(bs,)](...)` (sglang 0.5.9) in plain torch."""

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        def launch(
            req_to_token: torch.Tensor,
            req_pool_indices: torch.Tensor,
            lens: torch.Tensor,
            indptr: torch.Tensor,
            kv_start_idx: torch.Tensor | None,
            out: torch.Tensor,
            stride: int,
        ) -> None:
            fill_kv_indices(req_to_token, req_pool_indices, lens, indptr, out, kv_start_idx)

        return launch


class ReferenceTranslator:
    """`kv_index_translator` (sglang 0.5.23) for a plain pool: req_to_token holds physical rows."""

    needs_read_translate = False

    def __init__(self, req_to_token: torch.Tensor) -> None:
        self.req_to_token = req_to_token

    def pack_read_stream(
        self,
        plan: Any,
        *,
        req_pool_indices: torch.Tensor,
        seq_lens: torch.Tensor,
        indptr: torch.Tensor,
        out: torch.Tensor,
        **_: Any,
    ) -> bool:
        return fill_kv_indices(self.req_to_token, req_pool_indices, seq_lens, indptr, out)


class OnCPU(ast.NodeTransformer):
    """`device="cuda"` keyword arguments read as the CPU (this machine has no GPU)."""

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        if node.arg == "device" and isinstance(node.value, ast.Constant) and node.value.value == "cuda":
            return ast.keyword(arg="device", value=ast.Constant("cpu"))
        return node


def decode_path(
    source: str, filename: str, keep: dict[str, set[str] | None] = KEEP, more: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The classes (with only their `keep` methods) and functions named in `keep` of a backend
    source, compiled; `more` adds or replaces names they read (tools/sglang/graph_paths.py)."""
    body: list[ast.stmt] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in keep:
            wanted = keep[node.name]
            if wanted is not None:
                node.body = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
            node.bases = []  # AttentionBackend: the engine's base, unused by these methods
            body.append(node)
        elif isinstance(node, ast.FunctionDef) and node.name in keep:
            body.append(node)
    module = ast.fix_missing_locations(OnCPU().visit(ast.Module(body=body, type_ignores=[])))
    names: dict[str, Any] = {
        "torch": torch,
        "dataclass": dataclass,
        "Optional": Optional,
        "create_flashinfer_kv_indices_triton": ReferenceKvIndicesKernel(),
        "get_parallel": lambda: SimpleNamespace(dcp_enabled=False, attn_dcp_size=1),
        **(more or {}),
    }
    flags = __future__.annotations.compiler_flag  # as upstream: annotations stay strings
    exec(compile(module, filename, "exec", flags=flags, dont_inherit=True), names)
    return names


class World:
    """FP8 pools (one per layer) of `pages` pages of `page` slots past the padding page 0 (slot 0,
    where padded requests read), request rows of `req_to_token`, pages handed out and taken back."""

    def __init__(self, page: int, pages: int, context: int, layers: int = 2, seed: int = 0) -> None:
        self.page, self.context, self.gen = page, context, torch.Generator().manual_seed(seed)
        self.size = page * pages  # as sglang's pool: size + page_size rows, page 0 padding
        rows = self.size + page
        self.pools = [self.fp8(rows) for _ in range(layers)]
        self.free = [int(p) for p in torch.randperm(pages, generator=self.gen).add(1)]
        self.req_to_token = torch.zeros(16, context, dtype=torch.int32)
        self.tables: dict[int, list[int]] = {}

    def fp8(self, rows: int) -> torch.Tensor:
        return (torch.randn(rows, 1, RANK + ROPE, generator=self.gen) * 0.5).to(torch.float8_e4m3fn)

    def admit(self, row: int, tokens: int, share: tuple[int, int] | None = None) -> World:
        """Request `row` with `tokens` tokens; `share` = (row, n): its first n tokens are that
        request's (its pages, the last one possibly partly full: shared, not copied)."""
        self.tables[row] = list(self.tables[share[0]][: -(-share[1] // self.page)]) if share else []
        return self.grow(row, tokens)

    def grow(self, row: int, tokens: int) -> World:
        """Request `row` decoded up to `tokens` tokens: new pages where its last one is full."""
        table = self.tables[row]
        while len(table) * self.page < tokens:
            table.append(self.take())
        slots = torch.tensor([p * self.page + i for p in table for i in range(self.page)], dtype=torch.int32)
        self.req_to_token[row] = 0
        self.req_to_token[row, :tokens] = slots[:tokens]
        return self

    def take(self) -> int:
        """A free page, last freed first; it holds the new owner's KV from now on (rewritten)."""
        page = self.free.pop()
        for pool in self.pools:
            pool[page * self.page : (page + 1) * self.page] = self.fp8(self.page)
        return page

    def release(self, row: int) -> list[int]:
        """Request `row` done: its pages go back to the free list (the next admitted reuses them)."""
        pages = self.tables.pop(row)
        self.free.extend(reversed(pages))
        return pages

    def kv_pool(self) -> SimpleNamespace:
        return SimpleNamespace(get_key_buffer=lambda i: self.pools[i], size=self.size, page_size=self.page)


class PagedMLA:
    """BatchMLAPagedAttentionWrapper in plain torch at page size 1: query token j of request i
    attends over rows kv_indices[kv_indptr[i]:kv_indptr[i+1]] of the buffers `run` is given (causal:
    the last qo_len rows end at its own). Made with use_cuda_graph (a captured wrapper), `plan`
    copies kv_indices into the bound buffer and `run` reads that buffer as the replayed kernel does;
    the host-side plan of a replay (`_cached_module.plan`, fast_mla_decode_plan) sets the indptrs."""

    def __init__(
        self, workspace: Any = None, use_cuda_graph: bool = False, kv_indices: Any = None, **_: Any
    ) -> None:
        self.graph, self._kv_indices_buf = use_cuda_graph, kv_indices
        self._float_workspace_buffer = self._int_workspace_buffer = self._pin_memory_int_workspace_buffer = (
            None
        )
        self._cached_module = SimpleNamespace(plan=self._host_plan)
        self.seen: list[tuple] = []  # what each run was handed: shapes, dtypes, buffers

    def _host_plan(self, fws: Any, iws: Any, pws: Any, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor,
                   kv_len_arr: torch.Tensor, heads: int, head_dim_ckv: int, causal: bool) -> None:  # fmt: skip
        assert (heads, head_dim_ckv) == (HEADS, RANK)
        self.qo, self.indptr, self.causal = qo_indptr.clone(), kv_indptr.clone(), causal
        assert torch.equal(kv_len_arr.to(torch.int32), (self.indptr[1:] - self.indptr[:-1]).to(torch.int32))

    def plan(self, qo_indptr: torch.Tensor, kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_len_arr: torch.Tensor, heads: int, head_dim_ckv: int,
             head_dim_kpe: int, page_size: int, causal: bool, sm_scale: float, q_data_type: Any, kv_data_type: Any) -> None:  # fmt: skip
        assert (head_dim_kpe, page_size) == (ROPE, 1)
        self._host_plan(None, None, None, qo_indptr, kv_indptr, kv_len_arr, heads, head_dim_ckv, causal)
        self.scale = sm_scale
        if self.graph:
            self._kv_indices_buf[: kv_indices.numel()].copy_(kv_indices)
        else:
            self.ids = kv_indices.clone()

    def run(self, q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
            out: torch.Tensor | None = None, return_lse: bool = False) -> torch.Tensor:  # fmt: skip
        assert not return_lse and out is not None
        ids = self._kv_indices_buf if self.graph else self.ids
        self.seen.append((tuple(ckv_cache.shape), ckv_cache.dtype, tuple(q_nope.shape), ids.data_ptr()))
        with _disable_current_modes():  # the kernel's own work: graph-safe by construction
            for i in range(self.indptr.numel() - 1):
                rows = ids[int(self.indptr[i]) : int(self.indptr[i + 1])].long()
                c, k = ckv_cache[rows, 0].float(), kpe_cache[rows, 0].float()
                q0, q1 = int(self.qo[i]), int(self.qo[i + 1])
                logits = (q_nope[q0:q1].float() @ c.T + q_pe[q0:q1].float() @ k.T) * self.scale
                if self.causal:  # [tokens, heads, kv]: token j sees kv up to len - (q1 - q0) + j
                    seen = (
                        torch.arange(rows.numel())
                        <= rows.numel() - (q1 - q0) + torch.arange(q1 - q0)[:, None]
                    )
                    logits = logits.masked_fill(~seen[:, None, :], float("-inf"))
                out[q0:q1] = (logits.softmax(-1) @ c).to(out.dtype)
        return out


class Captured(TorchDispatchMode):
    """Records the operators that run inside it (a captured region): any DATA_DEPENDENT one is a
    host sync or a shape read off data, which a CUDA graph cannot replay."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if name.startswith(DATA_DEPENDENT):
            self.refused.append(name)
        return func(*args, **(kwargs or {}))
