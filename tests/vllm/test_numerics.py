"""The numerics gate on a real vLLM (CPU wheel), through `prompt_logprobs` (issue 61): the tiny Llama
with a seeded checkpoint, its own numerics measured teacher-forced under the schedules it varies (two
batch sizes, a warm prefix cache), then a candidate checkout whose logits carry a planted 10% scale
error judged against them: beyond, with its figures. The unchanged tree's server scored again is judged
the same way and is not beyond. Two launches, started together; both stopped.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agent.decision.gate import moves
from state.measurement.numerics import ForcedArgs, ForcedScores
from tests.vllm.conftest import TEMPLATE, VLLM_PYTHON, _need_venv, launch_vllm, stop_vllm
from tools.tolerance.forced import forced
from tools.vllm.cases import weighted
from tools.vllm.checkout import clone
from tools.vllm.engine import VllmEngine
from tools.vllm.target import serve_argv

pytestmark = pytest.mark.xdist_group("vllm")

PROMPTS = [
    "The cat sat on the mat and",
    "Once upon a time there was a",
    "The quick brown fox jumps over",
    "In the beginning the engine",
    "A kernel that moves the math",
    "Four score and seven years ago",
]
LOGITS = "vllm/model_executor/layers/logits_processor.py"
SCALE = "            if self.scale != 1.0:\n                logits *= self.scale\n"


def scores(base_url: str, schedule: str, tokens: list[list[str]] | None, **more: object) -> ForcedScores:
    args = ForcedArgs(
        base_url=base_url,
        model="tiny-llama",
        prompts=PROMPTS,
        max_tokens=12,
        schedule=schedule,
        path=VllmEngine.forced_path,
        continuations=tokens,
        **more,
    )
    return forced(args)


def serve(repo: Path, models: Path, log: Path):
    argv = serve_argv(
        VLLM_PYTHON, models / "tiny-llama", "tiny-llama", "--enforce-eager", "--dtype", "float32"
    )
    argv[argv.index("dummy")] = "safetensors"  # the seeded checkpoint: outputs depend on the context
    return launch_vllm(repo, argv, log)


def test_a_planted_scale_error_is_beyond_vllms_own_numerics_judged_through_prompt_logprobs(tmp_path: Path):
    _need_venv()
    assert VllmEngine.forced_path == "prefill" and VllmEngine.prefix_cache
    models = tmp_path / "models"
    weighted("tiny-llama", models)
    base = clone(TEMPLATE, tmp_path / "base")
    bad = clone(TEMPLATE, tmp_path / "bad")
    target = bad / LOGITS
    assert SCALE in target.read_text()
    target.write_text(
        target.read_text().replace(SCALE, "            logits *= self.scale * 1.1  # planted\n")
    )

    with ThreadPoolExecutor(2) as pool:  # both launches at once: a launch is one process busy at a time
        launching = [pool.submit(serve, tree, models, tmp_path / f"{tree.name}.log") for tree in (base, bad)]
    servers = [f.result() for f in launching if f.exception() is None]
    try:
        assert len(servers) == 2, [f.exception() for f in launching]
        url, bad_url = (s.base_url for s in servers)
        reference = scores(url, "alone", None)
        tokens = [[t.token for t in text.tokens] for text in reference.texts]
        assert all(len(t) >= 6 for t in tokens), tokens
        engine = [
            scores(url, "batch of 2", tokens, concurrent=2),
            scores(url, "batch of 6", tokens, concurrent=6),
            scores(url, "warm prefix cache", tokens, repeat=True),
        ]
        again = scores(url, "candidate", tokens)
        planted = scores(bad_url, "candidate", tokens)
    finally:
        for server in servers:
            stop_vllm(server)
    assert all(t.restarts == 0 and not t.cut for s in [*engine, again] for t in s.texts)  # one prefill each
    same = moves.judge(reference, engine, again, texts_equal=False)
    assert same.verdict == "within", moves.line(same)

    v = moves.judge(reference, engine, planted, texts_equal=False)
    line = moves.line(v)
    print(line)
    assert v.verdict == "beyond" and not v.passed, line
    assert v.mean_dlogprob > 2 * v.engine_mean_dlogprob and v.prompts == len(PROMPTS)
    assert line.startswith("beyond the engine's numerics: mean |dlogprob|")
