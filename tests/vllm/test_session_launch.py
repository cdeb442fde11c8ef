"""Session 1 on the real vLLM engine: a launch-option session on the tiny Llama.

The target is launched as users often start: `--enforce-eager --max-num-seqs 1` (one sequence per
decode step) while the workload keeps 8 requests in flight. The API profile reads vLLM's phase
scopes (host-bound or model-bound decode: which one depends on the machine's load, so the test
asserts the line, not the verdict); the launch-option search (`--proposer search`, one knob:
`--max-num-seqs`, choices 1 or 8, so its one trial is 8 whether the diagnosis implicates the knob
or TPE picks it) predicts the trial's output-throughput gain bound (`batching_gain_bound`: min(8,
8) / min(8, 1) = 8x), relaunches it beside the reference (interleaved arms: windows alternate
between the two servers), checks its greedy outputs (exact policy: the model is served in float32
from a seeded random checkpoint, since vLLM's dummy weights give every prompt the same output) and
judges the windows' output throughput. The rule keeps it; the session replays offline.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, last_json, perfloop
from tests.vllm.conftest import MODELS, VLLM_PYTHON
from tools.vllm.target import write_target

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400), pytest.mark.xdist_group("vllm")]

LLAMA_WEIGHTS = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file

folder = Path(sys.argv[1])
c = json.loads((folder / "config.json").read_text())
g = torch.Generator().manual_seed(0)
hidden, vocab, inter = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
heads, kv, dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]

def w(*shape):
    return torch.randn(*shape, generator=g) / shape[-1] ** 0.5

t = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": torch.ones(hidden),
     "lm_head.weight": w(vocab, hidden)}
for i in range(c["num_hidden_layers"]):
    p = f"model.layers.{i}."
    t |= {
        p + "self_attn.q_proj.weight": w(heads * dim, hidden),
        p + "self_attn.k_proj.weight": w(kv * dim, hidden),
        p + "self_attn.v_proj.weight": w(kv * dim, hidden),
        p + "self_attn.o_proj.weight": w(hidden, heads * dim),
        p + "mlp.gate_proj.weight": w(inter, hidden),
        p + "mlp.up_proj.weight": w(inter, hidden),
        p + "mlp.down_proj.weight": w(hidden, inter),
        p + "input_layernorm.weight": torch.ones(hidden),
        p + "post_attention_layernorm.weight": torch.ones(hidden),
    }
save_file({k: v.to(torch.bfloat16) for k, v in t.items()}, str(folder / "model.safetensors"),
          metadata={"format": "pt"})
"""
"""Seeded random weights of the usual scale (std 1/sqrt(fan_in), norms 1) for the tiny Llama."""

EXTRA = """
[workload]                      # 8 requests in flight: one sequence per step leaves 7 waiting
concurrency = 8
requests = 16
prompts = 8
input_len = [8, 24]
output_len = [24, 32]
objective = "output_throughput"

[correctness]
random_prompts = 1
max_prompt_chars = 200
max_tokens = 16
concurrent = 2
long_prompts = 0

[decide]
looks = 2                       # a second look of windows on the same pair while undecided
arms = "interleaved"            # windows alternate between the reference and the candidate server
auto_aa_pairs = 0
confirm_below = 1.5             # a second pair of launches only under 1.5x (a batching gain is large)

[search]
max_trials = 1
max_launches = 6                # the baseline, the trial and its reference, a confirming pair
seed = 0

[[search.knobs]]
name = "--max-num-seqs"
type = "choice"
choices = [1, 8]
first = 8
"""


def weighted_llama(dest: Path) -> Path:
    """`dest/tiny-llama`: the tiny Llama with a seeded random checkpoint (about 1 MB)."""
    folder = dest / "tiny-llama"
    shutil.copytree(MODELS / "tiny-llama", folder)
    subprocess.run(
        [str(VLLM_PYTHON), "-c", LLAMA_WEIGHTS, str(folder)], check=True, capture_output=True, timeout=300
    )
    return folder


def test_the_search_keeps_more_sequences_per_step_within_its_predicted_bound_and_replays(
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    weighted_llama(tmp_path / "models")
    flags = ("--enforce-eager", "--max-num-seqs", "1", "--dtype", "float32")
    toml = write_target(tmp_path / "t", flags=flags, extra_toml=EXTRA, models=tmp_path / "models")
    text = toml.read_text()
    assert text.count('"--load-format", "dummy"') == 1
    assert text.count("repeats = 3") == 1
    text = text.replace("repeats = 3", "repeats = 6")  # windows per arm: six short ones, ~2 s each
    toml.write_text(text.replace('"--load-format", "dummy"', '"--load-format", "safetensors"'))
    repo, home = tmp_path / "t" / "vllm", tmp_path / "home"
    proc = perfloop(
        home, "run", str(toml), "--json", "--proposer", "search", "--max-iterations", "1", timeout=2200
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    wall = time.monotonic() - t0
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    notes = {t["node"]: t["note"] for t in shown["transitions"]}

    # the API profile's phase scopes, read in the diagnosis
    assert "decode over" in notes["diagnose"] and "forward" in notes["diagnose"], notes["diagnose"]
    assert s["profile_method"] == "api"

    (trial,) = shown["decisions"]
    assert trial["playbook"] == "search-1" and trial["launch_argv"][-2:] == ["--max-num-seqs", "8"], trial
    assert trial["predicted_speedup"] == 8.0  # min(8, 8) / min(8, 1) at 8 requests in flight
    assert trial["verdict"] == "accepted" and trial["outputs_identical"] is True, trial["reason"]
    look = trial["judgement"]["looks"][-1]
    # the bound holds: what the windows realized lies within what batching can give
    assert 1.0 < look["ci_low"] <= 8.0, look
    assert (
        s["accepted"] == ["search-1"]
        and s["commits"] == []
        and s["launch_argv"][-2:] == ["--max-num-seqs", "8"]
    )
    (line,) = s["search_trials"]
    assert (
        line.startswith("search-1: --max-num-seqs 8: output throughput ")
        and "(predicted at most 8.00x)" in line
    )
    assert_clean(repo, s["branch"])

    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr[
        -2000:
    ]
    print(
        f"\nvLLM tiny Llama launch-option session (session 1): output throughput "
        f"{s['objective_before']:.1f} -> {s['objective_after']:.1f} tok/s at concurrency 8, judged "
        f"{look['speedup']:.2f}x (95% CI [{look['ci_low']:.2f}, {look['ci_high']:.2f}]) against a "
        f"predicted bound of 8.00x; TPOT p50 {s['tpot_ms_before']:.2f} -> {s['tpot_ms_after']:.2f} ms; "
        f"{s['server_launches']} launches, {wall:.0f} s wall"
    )
    print(json.dumps({"diagnose": notes["diagnose"][-300:], "trial": line}))
