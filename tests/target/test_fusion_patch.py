"""The decode-step-fusion playbook's mla_server patch: applies with or without the cast fix, keeps
the CPU's eager tokens (the refactor alone; compile is cuda-only), and on a GPU (`-m gpu`) the
compiled static step gives the eager step's greedy tokens, graph-replayed or not."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.target.conftest import FIX_DIFF, ROOT, SMALL, TARGET
from tests.target.test_static_decode import SCRIPT, run_static

FUSION_DIFF = ROOT / "playbooks" / "catalog" / "decode-step-fusion" / "patches" / "mla_server.diff"


def patched(tmp: Path, *diffs: Path) -> Path:
    copy = tmp / "mla_server"
    shutil.copytree(TARGET, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for diff in diffs:
        subprocess.run(["git", "apply", str(diff)], cwd=copy, check=True)
    return copy


def test_fusion_patch_applies_in_either_order_and_keeps_cpu_tokens(tmp_path: Path) -> None:
    both = patched(tmp_path / "a", FIX_DIFF, FUSION_DIFF)
    patched(tmp_path / "b", FUSION_DIFF, FIX_DIFF)
    fused = patched(tmp_path / "c", FUSION_DIFF)
    assert "emulate_precision_casts = True" in (fused / "mla_server" / "model.py").read_text()
    reference = run_static(TARGET, *SMALL)
    assert run_static(fused, *SMALL)["static"] == reference["static"]
    assert run_static(both, *SMALL)["legacy"] == reference["legacy"]


GPU_SCRIPT = SCRIPT.replace(
    "static = ModelRunner(cfg, static_decode=True)",
    "static = ModelRunner(cfg, static_decode=True)\nassert static.graph_runner is not None",
)
MID = [
    "--device",
    "cuda",
    "--pool-slots",
    "65536",
    "--layers",
    "6",
    "--heads",
    "16",
    "--hidden",
    "1024",
    "--experts",
    "8",
    "--ffn",
    "512",
    "--max-running",
    "8",
    "--context-len",
    "1024",
]


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a CUDA GPU")
@pytest.mark.parametrize("graphs", [True, False])
def test_compiled_step_gives_eager_tokens_on_gpu(tmp_path: Path, graphs: bool) -> None:
    flags = MID if graphs else [*MID, "--disable-cuda-graph"]
    fused = patched(tmp_path, FIX_DIFF, FUSION_DIFF)
    plain = patched(tmp_path / "plain", FIX_DIFF)

    def tokens(target: Path) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", GPU_SCRIPT, *flags],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.splitlines()[-1])

    assert tokens(fused)["static"] == tokens(plain)["static"]
