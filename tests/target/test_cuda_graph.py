"""CUDA-graph decode on a GPU (`pytest -m gpu tests/target/test_cuda_graph.py`; never in CI).

Standard library HTTP only, so it runs on a GPU host without openai. Greedy tokens must be the
same with graphs and eagerly (--disable-cuda-graph), solo and in any batch composition, also when
the batch is larger than every captured graph; the playbook diff must keep them and, under
graphs, cut TPOT (the cast is then what bounds the step). On a host without git, set
MLA_SERVER_FIXED_TARGET to a copy of the target with the diff applied.
"""

import http.client
import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.target.conftest import FIX_DIFF, TARGET

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs a CUDA GPU"),
]

# The glm5 preset's pool and heads on fewer, narrower layers: the full-pool cast dominates a
# graph-replayed step as it does on glm5, but servers start in seconds.
MID = [
    "--device",
    "cuda",
    "--pool-slots",
    "495552",
    "--layers",
    "12",
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
PROMPTS = [
    "The quick brown fox",
    "MLA",
    "a third prompt, longer than the others",
    "x",
    "Why is decode memory bound?",
]


def generate(server, prompt: str, tokens: int = 24) -> str:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": tokens, "temperature": 0}}
    status, reply = server.post("/generate", body)
    assert status == 200, reply
    return reply["text"]


def together(server, prompts: list[str]) -> list[str]:
    """The prompts sent at once (they decode in shared, changing batches)."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: generate(server, p), prompts))


def tpot_ms(server, tokens: int = 32, repeats: int = 3) -> float:
    """Best of `repeats` streamed greedy /generate requests: ms per token after the first."""
    best = float("inf")
    for _ in range(repeats):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        body = {
            "text": "time me",
            "stream": True,
            "sampling_params": {"max_new_tokens": tokens, "temperature": 0},
        }
        conn.request("POST", "/generate", json.dumps(body), {"Content-Type": "application/json"})
        times = [time.perf_counter() for line in conn.getresponse() if line.startswith(b"data: {")]
        conn.close()
        best = min(best, (times[-1] - times[0]) / (len(times) - 1) * 1000)
    return best


def graph_sizes(server) -> list[int]:
    return server.get("/get_server_info")[1]["cuda_graph_batch_sizes"]


def test_graph_and_eager_decode_give_the_same_tokens_in_any_batch(start_server):
    graph = start_server(*MID)
    assert graph_sizes(graph) == [1, 2, 4, 8]
    solo = [generate(graph, p) for p in PROMPTS]
    assert together(graph, PROMPTS[:3]) == solo[:3]
    assert together(graph, PROMPTS) == solo
    graph.stop()
    eager = start_server(*MID, "--disable-cuda-graph")
    assert graph_sizes(eager) == []
    assert [generate(eager, p) for p in PROMPTS] == solo
    assert together(eager, PROMPTS) == solo
    eager.stop()
    small = start_server(*MID, "--cuda-graph-max-bs", "2")  # 3+ requests: eager, padded to 8
    assert graph_sizes(small) == [1, 2]
    assert together(small, PROMPTS) == solo and generate(small, PROMPTS[0]) == solo[0]
    small.stop()


@pytest.fixture(scope="module")
def fixed_target(tmp_path_factory) -> Path:
    if os.environ.get("MLA_SERVER_FIXED_TARGET"):
        return Path(os.environ["MLA_SERVER_FIXED_TARGET"]).resolve()
    if shutil.which("git") is None:
        pytest.skip("no git to apply the diff; set MLA_SERVER_FIXED_TARGET")
    copy = tmp_path_factory.mktemp("fixed_gpu") / "mla_server"
    shutil.copytree(TARGET, copy, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(FIX_DIFF)], cwd=copy, check=True)
    return copy


def test_fix_keeps_tokens_in_both_paths_and_cuts_graph_tpot(start_server, fixed_target):
    assert (
        "get_key_buffer(layer_id).to("
        not in (fixed_target / "mla_server" / "attention" / "mla_backend.py").read_text()
    )
    base = start_server(*MID)
    base_texts, base_tpot = [generate(base, p) for p in PROMPTS], tpot_ms(base)
    base.stop()
    fixed = start_server(*MID, target=fixed_target)
    fixed_texts, fixed_tpot = [generate(fixed, p) for p in PROMPTS], tpot_ms(fixed)
    assert together(fixed, PROMPTS) == base_texts
    fixed.stop()
    eager = start_server(*MID, "--disable-cuda-graph", target=fixed_target)
    assert [generate(eager, p) for p in PROMPTS] == base_texts
    eager.stop()
    print(f"graph TPOT {base_tpot:.2f} -> {fixed_tpot:.2f} ms ({base_tpot / fixed_tpot:.1f}x)")
    assert fixed_texts == base_texts
    assert base_tpot / fixed_tpot >= 2
