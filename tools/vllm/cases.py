"""The two real-vLLM sessions of docs/VLLM.md, written ready to run: `python -m tools.vllm.cases
llama|mla DEST` (what `make vllm-demo` and `make vllm-demo-mla` run) writes DEST/target.toml, a
clone of the vLLM source repo `make vllm` built (DEST/vllm) and the model with a seeded random
checkpoint (DEST/models), and prints the TOML's path. No file is edited by hand.

- `llama`: the user's usual launch (`--enforce-eager --max-num-seqs 1`) at 8 requests in flight; the
  launch-option search tries `--max-num-seqs 8` (predicted at most 8x) beside its reference.
- `mla`: the PLANTED case: the clone's `main` carries examples/targets/vllm/planted-full-kv-cast.diff
  (CPU_MLA decode casts the WHOLE paged KV cache to float32 on every layer of every step); served in
  the model's bfloat16 (under `--dtype float32` the cast would copy float32 to float32 and cost
  nothing), profiled by the patch method; the playbook kv-cache-full-pool-cast fixes it.

Weights: vLLM's dummy weights give every prompt the same greedy output (no output gate could see a
wrong attention); a checkpoint of the usual scale (std 1/sqrt(fan_in), norms 1) makes outputs
depend on the context, as a real model's do.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tools.vllm.target import MODELS, PYTHON, ROOT, write_target

PLANTED = ROOT / "examples" / "targets" / "vllm" / "planted-full-kv-cast.diff"
BLOCKS = 1024
"""`--num-gpu-blocks-override`: 1,024 blocks of 16 tokens (36 MB a layer): the cast is most of a
decode step while a launch stays cheap."""
RUNNER = ("vllm/v1/worker/gpu_model_runner.py", "GPUModelRunner", "execute_model")
"""Where the patch method's hook goes (tools/vllm/hook.py HOOK_SITES)."""
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

def w(*shape):
    return (torch.randn(*shape, generator=g) / shape[-1] ** 0.5).to(torch.bfloat16)

def ones(n):
    return torch.ones(n, dtype=torch.bfloat16)

t = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": ones(hidden), "lm_head.weight": w(vocab, hidden)}
for i in range(c["num_hidden_layers"]):
    p = f"model.layers.{i}."
    if "kv_lora_rank" in c:  # DeepSeek-V2 MLA
        rank, rope, nope, v = c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        t |= {
            p + "self_attn.q_proj.weight": w(heads * (nope + rope), hidden),
            p + "self_attn.kv_a_proj_with_mqa.weight": w(rank + rope, hidden),
            p + "self_attn.kv_a_layernorm.weight": ones(rank),
            p + "self_attn.kv_b_proj.weight": w(heads * (nope + v), rank),
            p + "self_attn.o_proj.weight": w(hidden, heads * v),
        }
    else:  # Llama
        kv, dim = c["num_key_value_heads"], c["head_dim"]
        t |= {
            p + "self_attn.q_proj.weight": w(heads * dim, hidden),
            p + "self_attn.k_proj.weight": w(kv * dim, hidden),
            p + "self_attn.v_proj.weight": w(kv * dim, hidden),
            p + "self_attn.o_proj.weight": w(hidden, heads * dim),
        }
    t |= {
        p + "mlp.gate_proj.weight": w(inter, hidden),
        p + "mlp.up_proj.weight": w(inter, hidden),
        p + "mlp.down_proj.weight": w(hidden, inter),
        p + "input_layernorm.weight": ones(hidden),
        p + "post_attention_layernorm.weight": ones(hidden),
    }
save_file(t, str(folder / "model.safetensors"), metadata={"format": "pt"})
"""
"""Writes seeded random weights of the usual scale as the model folder's checkpoint."""

LLAMA = """
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

MLA = f"""model_runner_path = "{RUNNER[0]}"
hook_class = "{RUNNER[1]}"
hook_method = "{RUNNER[2]}"

[workload]                      # judged on windows' output throughput: once the cast is gone a
concurrency = 1                 # decode step is so quick that vLLM's API server merges a request's
requests = 4                    # deltas (whole outputs in one delta), and a client-side TPOT reads
prompts = 4                     # ~0 ms; tokens over a window's wall time stay true. One request at
                                # a time: batched bfloat16 GEMMs differ with the batch, and the
                                # exact output gate compares greedy outputs token for token
input_len = [8, 24]
output_len = [24, 32]
objective = "output_throughput"

[correctness]
random_prompts = 1
max_prompt_chars = 300
max_tokens = 16
concurrent = 0
long_prompts = 0

[decide]
looks = 2
arms = "interleaved"            # the reference tree launched beside: no drift between the arms
auto_aa_pairs = 0
"""


def weighted(model: str, dest: Path, models: Path = MODELS, python: Path = PYTHON) -> Path:
    """`dest/MODEL`: the tiny model with a seeded random checkpoint (1-2 MB) and a chat template."""
    folder = dest / model
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(models / model, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.setdefault("chat_template", CHAT_TEMPLATE)  # perfloop's client speaks chat completions
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    subprocess.run([str(python), "-c", WEIGHTS, str(folder)], check=True, capture_output=True, timeout=300)
    return folder


def _edit(path: Path, edits: dict[str, str]) -> None:
    text = path.read_text()
    for old, new in edits.items():
        if text.count(old) != 1:
            raise AssertionError(f"{path}: expected {old!r} once")
        text = text.replace(old, new)
    path.write_text(text)


def _git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=perfloop", "-c", "user.email=perfloop@localhost"]
    subprocess.run(["git", "-C", str(repo), *identity, *args], check=True, capture_output=True)


def write_llama(folder: Path) -> Path:
    """Session 1's target: the tiny Llama, one sequence per step at 8 requests in flight. Float32:
    in bfloat16 vLLM's CPU attention takes its AMX path (SIGILL in a VM that does not grant AMX)."""
    weighted("tiny-llama", folder / "models")
    flags = ("--enforce-eager", "--max-num-seqs", "1", "--dtype", "float32")
    path = write_target(folder, flags=flags, extra_toml=LLAMA, models=folder / "models")
    _edit(path, {'"--load-format", "dummy"': '"--load-format", "safetensors"', "repeats = 3": "repeats = 6"})
    return path


def write_mla(folder: Path) -> Path:
    """Session 2's target: the planted full-cache cast committed on the clone's main, the model in
    its bfloat16, CPU_MLA pinned (a CPU with AMX would pick AMX_MLA), the patch profile method."""
    weighted("tiny-mla", folder / "models")
    flags = ("--enforce-eager", "--attention-backend", "CPU_MLA", "--num-gpu-blocks-override", str(BLOCKS))
    path = write_target(
        folder, model="tiny-mla", flags=flags, profile=False, extra_toml=MLA, models=folder / "models"
    )
    _edit(
        path,
        {'"--load-format", "dummy"': '"--load-format", "safetensors"', 'method = "api"': 'method = "patch"'},
    )
    _git(folder / "vllm", "apply", str(PLANTED))
    _git(
        folder / "vllm",
        "commit",
        "-q",
        "-am",
        "PLANTED (perfloop's vLLM case): full KV-cache cast per decode step",
    )
    return path


CASES = {"llama": write_llama, "mla": write_mla}


def main(argv: list[str]) -> int:
    """`python -m tools.vllm.cases llama|mla DEST`: write the case (DEST replaced) and print its TOML."""
    if len(argv) != 2 or argv[0] not in CASES:
        print(f"usage: python -m tools.vllm.cases {'|'.join(CASES)} DEST", file=sys.stderr)
        return 2
    if not (PYTHON.exists() and (MODELS / "tiny-mla").is_dir()):
        print(f"error: the vLLM venv is not built ({PYTHON.parent.parent}); run `make vllm`", file=sys.stderr)
        return 2
    dest = Path(argv[1]).resolve()
    shutil.rmtree(dest, ignore_errors=True)
    print(CASES[argv[0]](dest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
