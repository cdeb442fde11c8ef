"""The SGLang gather-then-cast patches, executed: the real upstream backend methods, unpatched and
patched, run on CPU and give identical decode outputs.

From the real wheel's `flashinfer_mla_backend.py`, before and after `git apply` of the playbook's
patch for that release, this takes the decode path exactly as written (`init_forward_metadata`,
`FlashInferMLAIndicesUpdaterDecode.update` / `call_begin_forward`, `forward_decode` and the patch's
helpers) and runs it with the engine's CUDA-only pieces replaced by plain-torch references:
FlashInfer's `BatchMLAPagedAttentionWrapper` (plan + run, page size 1), the triton kernel (0.5.9)
or translator (0.5.23) that writes each request's KV slot ids, and `device="cuda"` read as the CPU.
The unpatched run casts the whole FP8 pool and plans on pool slot ids; the patched one must plan on
0..n-1 over the gathered rows and give bit-identical outputs. A patch that gathered the wrong rows,
planned the wrong ids or cast the wrong buffer would change the outputs.
"""

from __future__ import annotations
import __future__

import ast
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
import torch

from tests.sglang.conftest import unpack

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "playbooks" / "catalog" / "kv-cache-full-pool-cast" / "patches"
BACKEND = "python/sglang/srt/layers/attention/flashinfer_mla_backend.py"
HEADS, RANK, ROPE, SCALE = 4, 512, 64, 0.1
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


class ReferenceMLAWrapper:
    """BatchMLAPagedAttentionWrapper for page size 1 in plain torch: request i attends over rows
    kv_indices[kv_indptr[i]:kv_indptr[i+1]] of the buffers `run` is given."""

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe,
             page_size, causal, sm_scale, q_data_type, kv_data_type):  # fmt: skip
        assert (num_heads, head_dim_ckv, head_dim_kpe, page_size, causal) == (HEADS, RANK, ROPE, 1, False)
        # FlashInfer copies the plan into its own buffers: the caller reuses kv_indptr.
        self.indptr, self.ids, self.scale = kv_indptr.clone(), kv_indices.clone(), sm_scale
        assert torch.equal(kv_len_arr, self.indptr[1:] - self.indptr[:-1])

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, return_lse=False):
        assert not return_lse
        self.rows_given = ckv_cache.shape[0]
        for i in range(q_nope.shape[0]):
            rows = self.ids[self.indptr[i] : self.indptr[i + 1]].long()
            c, k = ckv_cache[rows, 0].float(), kpe_cache[rows, 0].float()
            logits = (q_nope[i].float() @ c.T + q_pe[i].float() @ k.T) * self.scale
            out[i] = (logits.softmax(-1) @ c).to(out.dtype)
        return out


def fill_kv_indices(req_to_token, req_pool_indices, seq_lens, indptr, out, kv_start_idx=None):
    """What sglang's kv-index triton kernel / translator writes: each request's slots, in order."""
    for i in range(int(seq_lens.numel())):
        start, n = (0 if kv_start_idx is None else int(kv_start_idx[i])), int(seq_lens[i])
        out[int(indptr[i]) : int(indptr[i]) + n] = req_to_token[req_pool_indices[i], start : start + n]
    return True


class ReferenceKvIndicesKernel:
    """`create_flashinfer_kv_indices_triton[(bs,)](...)` (sglang 0.5.9) in plain torch."""

    def __getitem__(self, grid):
        def launch(req_to_token, req_pool_indices, lens, indptr, kv_start_idx, out, stride):
            fill_kv_indices(req_to_token, req_pool_indices, lens, indptr, out, kv_start_idx)

        return launch


class ReferenceTranslator:
    """`kv_index_translator` (sglang 0.5.23) for a plain pool: req_to_token holds physical rows."""

    needs_read_translate = False

    def __init__(self, req_to_token: torch.Tensor) -> None:
        self.req_to_token = req_to_token

    def pack_read_stream(self, plan, *, req_pool_indices, seq_lens, indptr, out, **_):
        return fill_kv_indices(self.req_to_token, req_pool_indices, seq_lens, indptr, out)


class OnCPU(ast.NodeTransformer):
    """`device="cuda"` keyword arguments read as the CPU (this machine has no GPU)."""

    def visit_keyword(self, node: ast.keyword) -> ast.keyword:
        if node.arg == "device" and isinstance(node.value, ast.Constant) and node.value.value == "cuda":
            return ast.keyword(arg="device", value=ast.Constant("cpu"))
        return node


def decode_path(source: str, filename: str) -> dict:
    """The decode-path classes of a backend source, with only the KEEP methods, compiled."""
    body = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in KEEP:
            wanted = KEEP[node.name]
            if wanted is not None:
                node.body = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
            node.bases = []  # AttentionBackend: the engine's base, unused by these methods
            body.append(node)
    module = ast.fix_missing_locations(OnCPU().visit(ast.Module(body=body, type_ignores=[])))
    names = {
        "torch": torch,
        "dataclass": dataclass,
        "Optional": Optional,
        "create_flashinfer_kv_indices_triton": ReferenceKvIndicesKernel(),
        "get_parallel": lambda: SimpleNamespace(dcp_enabled=False, attn_dcp_size=1),
    }
    flags = __future__.annotations.compiler_flag  # as upstream: annotations stay strings
    exec(compile(module, filename, "exec", flags=flags, dont_inherit=True), names)
    return names


class Decode:
    """Is a decode step (and not idle, extend or verify)."""

    def is_decode_or_idle(self) -> bool:
        return True

    def is_decode(self) -> bool:
        return True


def run_decode(names: dict, pools: list[torch.Tensor], req_to_token, req_pool_indices, seq_lens, qs):
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


def case(seq_lens: list[int], pool_rows: int = 4096, layers: int = 2, seed: int = 0):
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


@pytest.fixture(scope="module", params=["0.5.9", "0.5.23"])
def sources(request, tmp_path_factory) -> tuple[str, dict, dict]:
    """The release's backend, compiled as upstream ships it and as the playbook patch leaves it."""
    version = request.param
    ws = unpack(version, tmp_path_factory.mktemp(f"sglang-{version}"))
    repo = Path(ws.repo.working_tree_dir)
    ws.close()
    before = (repo / BACKEND).read_text()
    subprocess.run(["git", "-C", str(repo), "apply", str(PATCHES / f"sglang-{version}.diff")], check=True)
    after = (repo / BACKEND).read_text()
    assert after != before
    return version, decode_path(before, f"upstream/{BACKEND}"), decode_path(after, f"patched/{BACKEND}")


@pytest.fixture(autouse=True)
def _no_graph_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU build of torch raises on the CUDA capture query; on CPU nothing is being captured."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)


@pytest.mark.parametrize("seq_lens", [[1], [7, 100, 3], [33] * 6])
def test_patched_decode_equals_upstream_and_reads_only_active_rows(sources, seq_lens) -> None:
    version, upstream, patched = sources
    pools, req_to_token, req_pool_indices, lens, qs = case(seq_lens)
    expected, up = run_decode(upstream, pools, req_to_token, req_pool_indices, lens, qs)
    got, pb = run_decode(patched, pools, req_to_token, req_pool_indices, lens, qs)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)), version
    n = sum(seq_lens)
    assert up.decode_wrapper.rows_given == pools[0].shape[0]  # upstream: the whole pool, cast
    assert pb.decode_wrapper.rows_given == n  # patched: only the batch's rows, gathered then cast
    assert torch.equal(pb.decode_wrapper.ids, torch.arange(n, dtype=torch.int32))  # planned on 0..n-1
    assert torch.equal(pb.forward_metadata.gathered_kv_indices, up.decode_wrapper.ids)  # the real rows
    assert expected[0].shape == (len(seq_lens), HEADS * RANK)


def test_same_dtype_kv_keeps_the_upstream_path(sources) -> None:
    """A BF16 pool (nothing to cast): the patch plans on the pool's own ids, as upstream does."""
    _, upstream, patched = sources
    pools, req_to_token, req_pool_indices, lens, qs = case([5, 9])
    pools = [p.to(torch.bfloat16) for p in pools]
    expected, up = run_decode(upstream, pools, req_to_token, req_pool_indices, lens, qs)
    got, pb = run_decode(patched, pools, req_to_token, req_pool_indices, lens, qs)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert pb.forward_metadata.gathered_kv_indices is None
    assert torch.equal(pb.decode_wrapper.ids, up.decode_wrapper.ids)
