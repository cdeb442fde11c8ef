"""The planted case of tests/vllm/test_mla_*.py: vLLM's CPU_MLA decode with a PLANTED full-KV-cache cast.

`planted_repo(dest)` is a clone of the vLLM source repo (`make vllm`) with the planted change
committed on `main`, as a user's tree is found: examples/targets/vllm/planted-full-kv-cast.diff
makes CPU_MLA decode compute in float32 over a float32 copy of the WHOLE KV cache, on every layer
of every decode step (the bug class SGLang's FlashInfer MLA backend had for GLM-5; upstream vLLM
has no such cast). The built-in playbook kv-cache-full-pool-cast fixes it with its `vllm` patch.
"""

from __future__ import annotations

import ast
import subprocess
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


def whole_cache_casts(fn: ast.FunctionDef) -> list[str]:
    """Calls `kv_c_and_k_pe_cache.to(...)` in the function: a cast of the whole cache tensor."""
    return [
        ast.unparse(n)
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "kv_c_and_k_pe_cache"
    ]


def gathered_casts(fn: ast.FunctionDef) -> list[str]:
    """Calls `<cache>.index_select(...).to(...)`: the cast after the gather."""
    return [
        ast.unparse(n)
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "to"
        and isinstance(n.func.value, ast.Call)
        and isinstance(n.func.value.func, ast.Attribute)
        and n.func.value.func.attr == "index_select"
    ]
