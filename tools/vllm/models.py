"""Tiny model directories for the real vLLM engine, built here without a download.

Run with the vLLM venv's python (it has `tokenizers`): `python tools/vllm/models.py DIR` writes
`DIR/tiny-llama` and `DIR/tiny-mla`, each a `config.json`, a BPE tokenizer trained locally on a
seeded text, and `tokenizer_config.json`. vLLM serves them with `--load-format dummy` (seeded random
weights), so greedy outputs are the same at every launch of the same tree and launch options.

The MLA model is DeepSeek-V2-style (`DeepseekV2ForCausalLM`, dense layers only): vLLM's CPU MLA
backends (`CPU_MLA` decode, `CPU_SDPA_MLA` prefill) need `kv_lora_rank + qk_rope_head_dim == 576`;
with another sum `/health` answers 200 and the first request kills the engine.

Standalone on purpose (stdlib + tokenizers): perfloop's own venv never imports vLLM's packages.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB_SIZE = 1024
CONTEXT_TOKENS = 2048
WORDS = [
    "the",
    "a",
    "kv",
    "cache",
    "decode",
    "step",
    "token",
    "model",
    "server",
    "latency",
    "throughput",
    "attention",
    "layer",
    "batch",
    "prompt",
    "output",
    "request",
    "engine",
    "kernel",
    "memory",
    "host",
    "device",
    "profile",
    "trace",
    "patch",
    "launch",
    "option",
    "gpu",
    "cpu",
    "tensor",
    "head",
    "rank",
    "rope",
    "lora",
    "expert",
    "weight",
    "norm",
    "scale",
    "sample",
    "schedule",
    "queue",
    "time",
    "fast",
    "slow",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "write",
    "explain",
    "list",
    "haiku",
    "prime",
    "number",
    "sentence",
    "story",
    "lighthouse",
    "keeper",
    "sea",
    "light",
    "night",
    "ship",
    "storm",
    "wave",
    "stone",
    "tower",
    "old",
    "new",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}

MLA = {  # kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576, the CPU MLA backends' one shape
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 2,  # every layer dense: no expert routing in a tiny model
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_layer_freq": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "topk_method": "greedy",
    "scoring_func": "softmax",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
}


def corpus(lines: int = 4000, seed: int = 0) -> list[str]:
    """Seeded sentences of `WORDS` with digits and punctuation, the tokenizer's training text."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 16))]
        out.append(
            " ".join(words).capitalize() + rng.choice([".", "?", "!", ",", ":"]) + f" {rng.randint(0, 999)}"
        )
    return out


def write_tokenizer(directory: Path) -> None:
    """A byte-level BPE of VOCAB_SIZE tokens trained on `corpus()`, with <s>, </s> and <unk>."""
    from tokenizers import (  # type: ignore[import-not-found]  # the vLLM venv has it
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": CONTEXT_TOKENS,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        # /v1/chat/completions (perfloop's profile request) needs one: transformers has no default
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_model(directory: Path, config: dict[str, object]) -> None:
    """`config.json` (with the vocabulary, context and special token ids) and the tokenizer."""
    directory.mkdir(parents=True, exist_ok=True)
    write_tokenizer(directory)
    full = dict(config)
    full.update(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=CONTEXT_TOKENS,
        bos_token_id=1,
        eos_token_id=2,
        torch_dtype="bfloat16",
    )
    (directory / "config.json").write_text(json.dumps(full, indent=2) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python tools/vllm/models.py DIR  (writes DIR/tiny-llama and DIR/tiny-mla)",
            file=sys.stderr,
        )
        return 2
    root = Path(argv[0])
    write_model(root / "tiny-llama", LLAMA)
    write_model(root / "tiny-mla", MLA)
    print(f"tiny vLLM models in {root}: tiny-llama, tiny-mla")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
