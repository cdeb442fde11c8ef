"""`bench.score`: the tolerance gate's scores, by teacher forcing through OpenAI text completions.

The reference's greedy continuation of each prompt is sent back as part of the prompt (`echo:
true, logprobs: 1, max_tokens: 0`), so the server returns, for every position of the
continuation, the log-probability of the token there and its own most likely token: both arms are
scored on the very same contexts, never on generations that drift apart after a flipped token.
Standard library HTTP, so it also runs on a bare SSH host.
"""

from __future__ import annotations

import json
import time
from typing import Any

from state.tolerance import ScoreArgs, ScoredText, ScoreResult
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
    tops = [logprobs["top_logprobs"][i] for i in keep]
    if any(not t for t in tops) or any(logprobs["token_logprobs"][i] is None for i in keep):
        raise ServerError("the server's echo answer has positions without logprobs past the prompt")
    return ScoredText(
        prompt=prompt,
        continuation=continuation,
        tokens=[logprobs["tokens"][i] for i in keep],
        token_logprobs=[float(logprobs["token_logprobs"][i]) for i in keep],
        top1=[max(t, key=t.get) for t in tops],
    )


@tool("bench.score")
def score(args: ScoreArgs) -> ScoreResult:
    """Generate greedy continuations (unless given), then score prompt + continuation by echo."""
    t0 = time.perf_counter()
    conts = args.continuations
    if conts is None:
        conts = []
        for i, prompt in enumerate(args.prompts):
            report(f"tolerance gate: greedy continuation {i + 1}/{len(args.prompts)}")
            body = {"model": args.model, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0}
            conts.append(completions(args.base_url, body, args.timeout_s).get("text") or "")
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
        texts.append(continuation_scores(prompt, cont, choice.get("logprobs")))
    return ScoreResult(texts=texts, duration_s=time.perf_counter() - t0)
