"""The static-shape decode step (what CUDA graphs capture on cuda), run eagerly on the CPU in a
subprocess: same greedy tokens as the per-request decode, whatever the batch composition, and the
playbook diff removes the full-pool cast from both decode paths."""

import json
import subprocess
import sys

import pytest

from tests.target.conftest import FIX_DIFF, SMALL, TARGET

# Prefill each prompt, decode 12 tokens for all of them together (legacy per-request decode, then
# the static step) and each alone with the static step; print the texts as JSON.
SCRIPT = r"""
import json, sys, torch
from mla_server.config import parse_config
from mla_server.model_runner import ModelRunner
from mla_server.scheduler import Request
from mla_server.tokenizer import encode

cfg = parse_config(["--port", "1"] + sys.argv[1:])

def generate(runner, prompts, steps=12):
    reqs = []
    for prompt in prompts:
        req = Request(encode(prompt), steps + 1, 0.0, None, [])
        req.slots = runner.kv_pool.allocator.alloc(req.slots_needed)
        req.slots_device = torch.tensor(req.slots)
        req.output_ids.append(runner.forward_extend(req))
        reqs.append(req)
    for _ in range(steps):
        for req, token in zip(reqs, runner.forward_decode(runner.build_decode_batch(reqs))):
            req.output_ids.append(token)
    for req in reqs:
        runner.kv_pool.allocator.free(req.slots)
    return [bytes(req.output_ids).decode() for req in reqs]

prompts = ["The quick brown fox", "MLA", "a third prompt, longer than the others"]
static = ModelRunner(cfg, static_decode=True)
print(json.dumps({
    "sizes": cfg.decode_batch_sizes(),
    "padded": [static.graph_runner.padded_bs(n) for n in range(1, cfg.max_running + 1)],
    "padding_slot": static.kv_pool.padding_slot, "free": static.kv_pool.allocator.available(),
    "legacy": generate(ModelRunner(cfg), prompts),
    "static": generate(static, prompts),
    "static_solo": [generate(static, [p])[0] for p in prompts],
}))
"""


def run_static(target, *flags: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *flags], cwd=target, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_static_step_gives_the_per_request_tokens_in_any_batch():
    res = run_static(TARGET, *SMALL, "--max-running", "6")
    assert res["sizes"] == [1, 2, 4, 6] and res["padded"] == [1, 2, 4, 4, 6, 6]
    assert res["padding_slot"] == 2047 and res["free"] == 2047  # reserved, never handed out
    assert res["static"] == res["static_solo"] == res["legacy"]


def test_batch_sizes_follow_the_cuda_graph_flags():
    res = run_static(TARGET, *SMALL, "--max-running", "40", "--cuda-graph-max-bs", "24")
    assert res["sizes"] == [1, 2, 4, 8, 16, 24]
    assert res["padded"][23] == 24 and res["padded"][24] == 40  # beyond the graphs: --max-running
    res = run_static(TARGET, *SMALL, "--cuda-graph-bs", "3")
    assert res["sizes"] == [3] and res["padded"] == [3, 3, 3, 4]
    # SGLang's batch-invariant mode: one shape for every batch, so what shares a step cannot move
    # a request's output (the output gate's controlled probe; gate/schedule.py)
    res = run_static(TARGET, *SMALL, "--max-running", "6", "--enable-deterministic-inference")
    assert res["sizes"] == [6] and res["padded"] == [6] * 6
    assert res["static"] == res["static_solo"] == res["legacy"]


@pytest.fixture(scope="module")
def fixed_target(tmp_path_factory):
    copy = tmp_path_factory.mktemp("fixed_static") / "mla_server"
    subprocess.run(["cp", "-r", str(TARGET), str(copy)], check=True)
    subprocess.run(["git", "apply", str(FIX_DIFF)], cwd=copy, check=True)
    return copy


def test_diff_removes_the_full_pool_cast_from_both_decode_paths(fixed_target):
    backend = (fixed_target / "mla_server" / "attention" / "mla_backend.py").read_text()
    pristine = (TARGET / "mla_server" / "attention" / "mla_backend.py").read_text()
    assert pristine.count("get_key_buffer(layer_id).to(q.dtype)") == 2  # forward_decode{,_static}
    assert "get_key_buffer(layer_id).to(" not in backend
    assert run_static(fixed_target, *SMALL)["static"] == run_static(TARGET, *SMALL)["static"]
