"""The correctness set: greedy outputs on prompts the patch author cannot tune to.

The timing prompts, plus `random_prompts` prompts of random words drawn per session (seeded by the
session id: the same in a replay, new in every session but a fork, which draws its parent's, whose
reference outputs it keeps), lengths from `min_prompt_chars` to
`max_prompt_chars`, plus `long_prompts` prompts at lengths stratified up to the context limit (the
last ending `max_tokens` below it), `max_tokens` generated each; every prompt alone, then the
first `concurrent` and every long prompt at once (requests of every length in flight together).
The reference's outputs are taken on the baseline launch; a candidate's must be equal, alone and
in the batch, before its timing can count.

The limit is the target file's `[correctness] context_tokens`, else what the baseline server
states (tools/limits.py); the long prompts' texts are fitted to the server's tokenizer on the
baseline and kept in the state, so every candidate gets the same texts. A session whose limit is
neither stated nor learned says so, and `--approve auto` waits for a human instead (`refusal`).
"""

from __future__ import annotations

import hashlib
import random

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, need
from state.engines.limits import ContextLimitArgs, FitArgs, LongPrompts
from state.measurement.correctness import CorrectnessConfig, OutputsArgs, OutputsResult
from state.sessions.loop import LoopState
from state.sessions.updates import LoopUpdate
from tools import bench, limits
from tools.errors import ConfigError
from tools.words import text_of


def seed_of(session_id: str) -> int:
    """The session's seed for its random prompts (pure)."""
    return int(hashlib.sha256(session_id.encode()).hexdigest()[:16], 16)


def seed_id(state: LoopState) -> str:
    """The id that seeds the session's correctness set: a fork's ancestor's (pure)."""
    return state.seed_session or state.session_id


def correctness_prompts(session_id: str, timing: list[str], cfg: CorrectnessConfig) -> list[str]:
    """The timing prompts plus this session's random ones (pure, deterministic per session)."""
    rng = random.Random(seed_of(session_id))
    extra = []
    for _ in range(cfg.random_prompts):
        target = rng.randint(min(cfg.min_prompt_chars, cfg.max_prompt_chars), cfg.max_prompt_chars)
        extra.append(text_of(rng, target))
    return [*timing, *extra]


def all_prompts(state: LoopState) -> list[str]:
    """The whole correctness set: timing, random, then long prompts (pure)."""
    base = correctness_prompts(seed_id(state), state.target.measure.prompts, state.target.correctness)
    return base + (state.long_prompts.prompts if state.long_prompts else [])


def learn_long_prompts(state: LoopState, runtime: Runtime[LoopContext]) -> LongPrompts | None:
    """On the baseline server: the context limit (the target file's, else the server's) and the
    long prompts fitted to its tokenizer; None where the session predates them or the target
    turns them off (`long_prompts = 0`: then nothing is asked of the server)."""
    cfg = state.target.correctness
    if not state.options.long_prompts or cfg.long_prompts == 0:
        return None
    limit: int | None = cfg.context_tokens
    source = "[correctness] context_tokens"
    if limit is None:
        base_url = need(state.server, "running server").base_url
        learned = call(
            runtime, limits.context_limit, ContextLimitArgs(base_url=base_url, model=state.target.model)
        )
        limit, source = learned.tokens, learned.source
    found = LongPrompts(limit=limit, source=source, stated_in_target=cfg.context_tokens is not None)
    if limit is None:
        return found
    try:
        lengths = limits.stratified_lengths(
            limit, cfg.max_tokens, cfg.long_prompts, random.Random(seed_of(seed_id(state)) + 1)
        )
    except ValueError as exc:
        raise ConfigError(f"[correctness] {exc} ({source})") from None
    fit = call(
        runtime,
        limits.fit_prompts,
        FitArgs(
            base_url=need(state.server, "running server").base_url,
            model=state.target.model,
            lengths=lengths,
            seed=seed_of(seed_id(state)) + 2,
            timeout_s=cfg.request_timeout_s,
        ),
    )
    return found.model_copy(update={"prompts": fit.prompts, "tokens": fit.tokens, "fit": fit})


def refusal(state: LoopState) -> str | None:
    """Why `--approve auto` waits for a human: the correctness set could not reach the context
    limit, which neither the server nor the target file states (pure)."""
    lp = state.long_prompts
    if lp is None or lp.limit is not None:
        return None
    return (
        f"auto approval refused: the context limit is unknown ({lp.source}), so the correctness set "
        "cannot reach it; state it in the target file ([correctness] context_tokens = N)"
    )


def take_outputs(state: LoopState, runtime: Runtime[LoopContext]) -> OutputsResult:
    """The running server's outputs on the session's correctness set."""
    cfg = state.target.correctness
    prompts = all_prompts(state)
    n_long = len(state.long_prompts.prompts) if state.long_prompts else 0
    first = min(cfg.concurrent, len(prompts) - n_long)
    together = None if n_long == 0 else [*range(first), *range(len(prompts) - n_long, len(prompts))]
    return call(
        runtime,
        bench.outputs,
        OutputsArgs(
            base_url=need(state.server, "running server").base_url,
            model=state.target.model,
            prompts=prompts,
            max_tokens=cfg.max_tokens,
            concurrent=min(cfg.concurrent, len(prompts)) if together is None else len(together),
            together=together,
            timeout_s=cfg.request_timeout_s,
            stagger=state.options.schedule_gate,
        ),
    )


def describe(state: LoopState, update: LoopUpdate) -> str:
    """The baseline's gate reference in `update`, e.g. `correctness set: 5 prompts (2 random, up to
    600 chars), 40 tokens each, 3 at once: 12.1 s` or `... scored for the tolerance gate: 3.2 s`,
    then the long prompts' line and what they cost."""
    cfg = state.target.correctness
    head = f"({cfg.random_prompts} random, up to {cfg.max_prompt_chars} chars), {cfg.max_tokens} tokens each"
    lp = update.get("long_prompts")
    tail = ""
    if lp is not None:
        tail = f"; {lp.line(cfg.max_tokens)}"
        if lp.prompts:
            n, tokens = len(lp.prompts), sum(lp.tokens) + len(lp.prompts) * cfg.max_tokens
            tail += f"; they cost {n} requests alone and {n} in the batch, {2 * tokens} tokens"
        if (why := refusal(state.model_copy(update={"long_prompts": lp}))) is not None:
            tail += f"; {why}"
    if (scored := update.get("tolerance_reference")) is not None:
        return (
            f"correctness set: {len(scored.texts)} prompts {head}, greedy continuations scored for "
            f"the tolerance gate: {scored.duration_s:.1f} s{tail}"
        )
    result = need(update.get("correctness"), "correctness outputs")
    again = " and staggered" if result.staggered else ""
    noise = update.get("output_noise")
    return (
        f"correctness set: {len(result.sequential)} prompts {head}, {len(result.concurrent)} at "
        f"once{again}: {result.duration_s:.1f} s{tail}" + (f"; {noise.line()}" if noise else "")
    )


def names(state: LoopState, n_timing: int) -> list[str]:
    """Each prompt of the set by kind, long ones with their length (pure)."""
    lp = state.long_prompts
    n_long = len(lp.prompts) if lp else 0
    n = len(all_prompts(state)) - n_long
    out = [
        f"timing prompt {i + 1}" if i < n_timing else f"random prompt {i - n_timing + 1}" for i in range(n)
    ]
    if lp is not None:
        out += [
            f"long prompt {i + 1}: {t} + {state.target.correctness.max_tokens} tokens of {lp.limit}"
            for i, t in enumerate(lp.tokens)
        ]
    return out


def batch_indices(state: LoopState, reference: OutputsResult) -> list[int]:
    """Which prompts of the set the concurrent batch held (pure)."""
    lp = state.long_prompts
    n_long = len(lp.prompts) if lp else 0
    total = len(reference.sequential)
    first = len(reference.concurrent) - n_long
    return [*range(first), *range(total - n_long, total)]


def differences(
    reference: OutputsResult, candidate: OutputsResult, named: list[str], batch: list[int] | None = None
) -> str | None:
    """Why the candidate fails the correctness set, or None (pure): `named` names each prompt,
    `batch` the prompts of the concurrent batch in its order (None: the first ones)."""
    batch = list(range(len(reference.concurrent))) if batch is None else batch
    alone = [
        named[i]
        for i, (a, b) in enumerate(zip(reference.sequential, candidate.sequential, strict=True))
        if a != b
    ]
    together = [
        named[batch[k]]
        for k, (a, b) in enumerate(zip(reference.concurrent, candidate.concurrent, strict=True))
        if a != b
    ]
    if not alone and not together:
        return None
    parts = []
    if alone:
        parts.append(f"{len(alone)}/{len(reference.sequential)} alone ({', '.join(alone)})")
    if together:
        parts.append(
            f"{len(together)}/{len(reference.concurrent)} in the concurrent batch ({', '.join(together)})"
        )
    return "outputs changed on the correctness set: " + "; ".join(parts)
