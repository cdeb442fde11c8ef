"""The planted case of tests/vllm/test_mla_*.py: vLLM's CPU_MLA decode with a PLANTED full-KV-cache cast.

`planted_repo(dest)` is a clone of the vLLM source repo (`make vllm`) with the planted change
committed on `main`, as a user's tree is found: examples/targets/vllm/planted-full-kv-cast.diff
makes CPU_MLA decode compute in float32 over a float32 copy of the WHOLE KV cache, on every layer
of every decode step (the bug class SGLang's FlashInfer MLA backend had for GLM-5; upstream vLLM
has no such cast). The built-in playbook kv-cache-full-pool-cast fixes it with its `vllm` patch.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from playbooks.engine import load_playbooks
from tools.vllm.checkout import clone
from tools.vllm.target import TEMPLATE

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "examples" / "targets" / "vllm" / "planted-full-kv-cast.diff"
BACKEND = "vllm/v1/attention/backends/mla/cpu_mla.py"
"""vLLM's CPU MLA backend (decode: `CPUMLAImpl.forward_mqa`), relative to the checkout."""
PLAYBOOK = next(b for b in load_playbooks() if b.id == "kv-cache-full-pool-cast")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def planted_repo(dest: Path) -> Path:
    """A clone of the vLLM source repo with the planted cast committed on main (the tree as found)."""
    repo = clone(TEMPLATE, dest)
    git(repo, "apply", str(PLANTED))
    identity = ["-c", "user.name=perfloop-tests", "-c", "user.email=tests@localhost"]
    git(
        repo,
        *identity,
        "commit",
        "-q",
        "-am",
        "PLANTED (perfloop test case): full KV-cache float32 cast per decode step",
    )
    return repo


def forward_mqa(source: str) -> ast.FunctionDef:
    """CPUMLAImpl.forward_mqa's AST."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "CPUMLAImpl")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward_mqa")


def _casts(fn: ast.FunctionDef, on: Callable[[ast.expr], bool]) -> list[str]:
    """The `<receiver>.to(...)` calls in the function whose receiver passes `on`, as source."""
    return [
        ast.unparse(n)
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and on(n.func.value)
    ]


def whole_cache_casts(fn: ast.FunctionDef) -> list[str]:
    """Calls `kv_c_and_k_pe_cache.to(...)` in the function: a cast of the whole cache tensor."""
    return _casts(fn, lambda v: isinstance(v, ast.Name) and v.id == "kv_c_and_k_pe_cache")


def gathered_casts(fn: ast.FunctionDef) -> list[str]:
    """Calls `<cache>.index_select(...).to(...)`: the cast after the gather."""
    return _casts(
        fn,
        lambda v: (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "index_select"
        ),
    )


CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
"""The messages' contents, one a line: the tiny model's chat template where it has none."""

WEIGHTS = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file

folder = Path(sys.argv[1])
c = json.loads((folder / "config.json").read_text())
g = torch.Generator().manual_seed(0)
hidden, vocab, inter, heads = c["hidden_size"], c["vocab_size"], c["intermediate_size"], c["num_attention_heads"]
rank, rope, nope, v = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]

def w(*shape):
    return (torch.randn(*shape, generator=g) / shape[-1] ** 0.5).to(torch.bfloat16)

def ones(n):
    return torch.ones(n, dtype=torch.bfloat16)

t = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": ones(hidden), "lm_head.weight": w(vocab, hidden)}
for i in range(c["num_hidden_layers"]):
    p = f"model.layers.{i}."
    t |= {
        p + "self_attn.q_proj.weight": w(heads * (nope + rope), hidden),
        p + "self_attn.kv_a_proj_with_mqa.weight": w(rank + rope, hidden),
        p + "self_attn.kv_a_layernorm.weight": ones(rank),
        p + "self_attn.kv_b_proj.weight": w(heads * (nope + v), rank),
        p + "self_attn.o_proj.weight": w(hidden, heads * v),
        p + "mlp.gate_proj.weight": w(inter, hidden),
        p + "mlp.up_proj.weight": w(inter, hidden),
        p + "mlp.down_proj.weight": w(hidden, inter),
        p + "input_layernorm.weight": ones(hidden),
        p + "post_attention_layernorm.weight": ones(hidden),
    }
save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
"""
"""Writes seeded random weights (std 1/sqrt(fan_in), norms 1) as the folder's checkpoint."""


def weighted_mla(models: Path, python: Path, dest: Path) -> Path:
    """`dest/tiny-mla`: the tiny MLA model with a seeded random checkpoint (about 2 MB).

    vLLM's dummy weights are uniform in +-1e-3, all from one seed: attention then moves the hidden
    state by about 1e-4 of its size, below bfloat16's resolution, and every prompt gets the same
    greedy output, so no output gate could see a wrong attention. Weights of the usual scale make
    the output depend on the context, as a real model's does."""
    folder = dest / "tiny-mla"
    shutil.copytree(models / "tiny-mla", folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.setdefault("chat_template", CHAT_TEMPLATE)  # perfloop's client speaks chat completions
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    subprocess.run([str(python), "-c", WEIGHTS, str(folder)], check=True, capture_output=True, timeout=300)
    return folder
