"""Texts of random words for prompts a patch author cannot tune to (the correctness set's)."""

from __future__ import annotations

import random

WORDS = [
    "cache",
    "kernel",
    "token",
    "decode",
    "prefill",
    "batch",
    "matrix",
    "tensor",
    "latency",
    "memory",
    "bandwidth",
    "layer",
    "attention",
    "expert",
    "router",
    "softmax",
    "scale",
    "vector",
    "index",
    "gather",
    "scatter",
    "copy",
    "cast",
    "float",
    "eight",
    "sixteen",
    "page",
    "pool",
    "slot",
    "request",
    "stream",
    "server",
    "client",
    "queue",
    "graph",
    "replay",
    "launch",
    "sync",
    "thread",
    "block",
    "warp",
    "shared",
    "global",
    "register",
    "pipeline",
    "shard",
    "rank",
    "reduce",
    "all",
    "the",
    "of",
    "and",
    "to",
]


def text_of(rng: random.Random, chars: int) -> str:
    """Random words, cut at `chars` characters (pure given `rng`)."""
    words: list[str] = []
    while len(" ".join(words)) < chars:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:chars]
