"""`bench.score`: the tolerance gate's scores, by teacher forcing through OpenAI text completions.

Both arms are judged on the very same contexts, never on generations that drift apart after a
flipped token:
- logprobs: the reference's greedy continuation of each prompt is sent back as part of the prompt
  (`echo: true, logprobs: 1, max_tokens: 0`), so the server returns the log-probability of every
  token of the continuation given everything before it (one prefill);
- greedy agreement on the decode path, which a prefill does not run: the server decodes greedily
  from the prompt; where its text leaves the continuation, that position counts as a miss and it
  decodes again from the prompt plus the continuation up to and including the missed character
  (one request per miss), until the continuation is covered.
Standard library HTTP, so it also runs on a bare SSH host.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

from state.measurement.tolerance import ScoreArgs, ScoredText, ScoreResult
from tools.door import tool
from tools.errors import ServerError
from tools.http import post_json
from tools.progress import report


def completions(base_url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST `/v1/completions`; the first choice, or a ServerError naming the server's answer."""
    try:
        status, text = post_json(base_url.rstrip("/") + "/v1/completions", body, timeout_s)
    except OSError as exc:
        raise ServerError(f"completion request to {base_url} failed: {exc}") from exc
    if status != 200:
        raise ServerError(
            f"/v1/completions answered HTTP {status}: {text[:200]} (the tolerance gate needs OpenAI "
            'text completions with echo and logprobs; or use [correctness] policy = "exact")'
        )
    try:
        return json.loads(text)["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ServerError(f"/v1/completions answered something not OpenAI-shaped: {text[:200]}") from None


def continuation_scores(prompt: str, continuation: str, logprobs: dict[str, Any] | None) -> ScoredText:
    """The continuation's positions of an echo answer's `logprobs` (pure): those whose
    `text_offset` lies at or past the prompt's end."""
    if not logprobs or not all(
        k in logprobs for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    ):
        raise ServerError(
            "the server returned no per-token logprobs for an echo request (needs `tokens`, "
            "`token_logprobs`, `top_logprobs`, `text_offset`); the tolerance gate cannot score it"
        )
    keep = [i for i, at in enumerate(logprobs["text_offset"]) if at >= len(prompt)]
    if keep and keep[0] == 0:
        keep = keep[1:]  # the first token has no context (an empty prompt)
    if any(logprobs["token_logprobs"][i] is None for i in keep):
        raise ServerError("the server's echo answer has positions without logprobs past the prompt")
    return ScoredText(
        prompt=prompt,
        continuation=continuation,
        tokens=[logprobs["tokens"][i] for i in keep],
        token_logprobs=[float(logprobs["token_logprobs"][i]) for i in keep],
    )


def follow(continuation: str, decode: Callable[[int], str]) -> list[bool]:
    """Per character of `continuation`, whether greedy decoding from the context before it
    produced it (pure given `decode(done) -> text decoded after continuation[:done]`): decode,
    keep the common prefix, count the next character a miss, decode again after it."""
    followed: list[bool] = []
    while len(followed) < len(continuation):
        done = len(followed)
        out, rest = decode(done), continuation[done:]
        k = next(
            (i for i, (a, b) in enumerate(zip(out, rest, strict=False)) if a != b), min(len(out), len(rest))
        )
        followed += [True] * k
        if len(followed) < len(continuation):
            followed.append(False)
    return followed


@tool("bench.score")
def score(args: ScoreArgs) -> ScoreResult:
    """Generate greedy continuations (unless given), then score prompt + continuation by echo."""
    t0 = time.perf_counter()
    conts = args.continuations
    if conts is None:
        conts = []
        for i, prompt in enumerate(args.prompts):
            report(f"tolerance gate: greedy continuation {i + 1}/{len(args.prompts)}")
            conts.append(greedy(args, prompt, args.max_tokens))
    if len(conts) != len(args.prompts):
        raise ServerError(f"{len(conts)} continuations for {len(args.prompts)} prompts")
    texts = []
    for i, (prompt, cont) in enumerate(zip(args.prompts, conts, strict=True)):
        report(f"tolerance gate: scoring {i + 1}/{len(args.prompts)}")
        body = {
            "model": args.model,
            "prompt": prompt + cont,
            "max_tokens": 0,
            "echo": True,
            "logprobs": 1,
            "temperature": 0,
        }
        choice = completions(args.base_url, body, args.timeout_s)
        scored = continuation_scores(prompt, cont, choice.get("logprobs"))
        if args.continuations is not None:
            report(f"tolerance gate: decoding along {i + 1}/{len(args.prompts)}")
            along = follow(cont, functools.partial(decode_after, args, prompt, cont))
            scored = scored.model_copy(update={"followed": along})
        texts.append(scored)
    return ScoreResult(texts=texts, duration_s=time.perf_counter() - t0)


def decode_after(args: ScoreArgs, prompt: str, continuation: str, done: int) -> str:
    """The server's greedy text after the prompt and the continuation's first `done` characters,
    as long as the rest of the continuation."""
    return greedy(args, prompt + continuation[:done], len(continuation) - done)


def greedy(args: ScoreArgs, prompt: str, max_tokens: int) -> str:
    """The server's greedy text after `prompt` (raw, no chat template)."""
    body = {"model": args.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    return completions(args.base_url, body, args.timeout_s).get("text") or ""
