"""The correctness set: greedy outputs on prompts the patch author cannot tune to.

The timing prompts, plus `random_prompts` prompts of random words drawn per session (seeded by the
session id: the same in a replay, new in every session), lengths from `min_prompt_chars` to
`max_prompt_chars`, `max_tokens` generated each; every prompt alone, then the first `concurrent`
at once. The reference's outputs are taken on the baseline launch; a candidate's must be equal,
alone and in the batch, before its timing can count.
"""

from __future__ import annotations

import hashlib
import random

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from state.decision import OutputsArgs, OutputsResult
from state.loop import LoopState
from state.target import CorrectnessConfig
from state.updates import LoopUpdate
from tools import bench

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


def correctness_prompts(session_id: str, timing: list[str], cfg: CorrectnessConfig) -> list[str]:
    """The timing prompts plus this session's random ones (pure, deterministic per session)."""
    rng = random.Random(int(hashlib.sha256(session_id.encode()).hexdigest()[:16], 16))
    extra = []
    for _ in range(cfg.random_prompts):
        target = rng.randint(min(cfg.min_prompt_chars, cfg.max_prompt_chars), cfg.max_prompt_chars)
        words: list[str] = []
        while len(" ".join(words)) < target:
            words.append(rng.choice(WORDS))
        extra.append(" ".join(words)[:target])
    return [*timing, *extra]


def take_outputs(state: LoopState, runtime: Runtime[LoopContext]) -> OutputsResult:
    """The running server's outputs on the session's correctness set."""
    cfg = state.target.correctness
    prompts = correctness_prompts(state.session_id, state.target.measure.prompts, cfg)
    return call(
        runtime,
        bench.outputs,
        OutputsArgs(
            base_url=need(state.server, "running server").base_url,
            model=state.target.model,
            prompts=prompts,
            max_tokens=cfg.max_tokens,
            concurrent=min(cfg.concurrent, len(prompts)),
            timeout_s=cfg.request_timeout_s,
        ),
    )


def describe(state: LoopState, update: LoopUpdate) -> str:
    """The baseline's gate reference in `update`, e.g. `correctness set: 5 prompts (2 random, up to
    600 chars), 40 tokens each, 3 at once: 12.1 s` or `... scored for the tolerance gate: 3.2 s`."""
    cfg = state.target.correctness
    head = f"({cfg.random_prompts} random, up to {cfg.max_prompt_chars} chars), {cfg.max_tokens} tokens each"
    if (scored := update.get("tolerance_reference")) is not None:
        return (
            f"correctness set: {len(scored.texts)} prompts {head}, greedy continuations scored for "
            f"the tolerance gate: {scored.duration_s:.1f} s"
        )
    result = need(update.get("correctness"), "correctness outputs")
    return (
        f"correctness set: {len(result.sequential)} prompts {head}, {len(result.concurrent)} at "
        f"once: {result.duration_s:.1f} s"
    )


def differences(reference: OutputsResult, candidate: OutputsResult, n_timing: int) -> str | None:
    """Why the candidate fails the correctness set, or None (pure)."""

    def name(i: int) -> str:
        return f"timing prompt {i + 1}" if i < n_timing else f"random prompt {i - n_timing + 1}"

    alone = [
        name(i)
        for i, (a, b) in enumerate(zip(reference.sequential, candidate.sequential, strict=True))
        if a != b
    ]
    batch = [
        name(i)
        for i, (a, b) in enumerate(zip(reference.concurrent, candidate.concurrent, strict=True))
        if a != b
    ]
    if not alone and not batch:
        return None
    parts = []
    if alone:
        parts.append(f"{len(alone)}/{len(reference.sequential)} alone ({', '.join(alone)})")
    if batch:
        parts.append(f"{len(batch)}/{len(reference.concurrent)} in the concurrent batch ({', '.join(batch)})")
    return "outputs changed on the correctness set: " + "; ".join(parts)
