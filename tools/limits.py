"""The server's context limit, from the endpoints that state it: SGLang's `/get_model_info`
(`context_length`) and `/get_server_info` (`context_length`, `max_total_num_tokens`: the KV pool,
which also bounds one request), the demo server's `/get_server_info` (`context_len`), and an
OpenAI-compatible `/v1/models` (`max_model_len`, vLLM and the demo). The smallest stated value is
the limit; a server that states none gives `tokens = None` and says so.
"""

from __future__ import annotations

import json
import math
import random
import time
import urllib.error
import urllib.request
from typing import Any

from state.engines.limits import ContextLimit, ContextLimitArgs, FitArgs, FittedPrompts
from tools.client.stream import chat_body, stream_completion
from tools.door import tool
from tools.errors import ServerError
from tools.progress import report
from tools.words import text_of

FIELDS = {
    "/get_model_info": ("context_length",),
    "/get_server_info": ("context_length", "context_len", "max_total_num_tokens"),
}
"""Endpoints answering one JSON object, and the fields of it that bound a request's tokens."""


def _get(url: str, timeout_s: float) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def stated(answers: dict[str, Any], model: str) -> list[tuple[int, str]]:
    """(tokens, `endpoint field`) for every positive integer limit in the endpoints' answers (pure)."""
    found = []
    for path, fields in FIELDS.items():
        body = answers.get(path)
        if not isinstance(body, dict):
            continue
        for name in fields:
            value = body.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                found.append((value, f"{path} {name}"))
    models = answers.get("/v1/models")
    for entry in models.get("data", []) if isinstance(models, dict) else []:
        value = entry.get("max_model_len") if isinstance(entry, dict) else None
        if isinstance(value, int) and value > 0 and entry.get("id") in (model, None):
            found.append((value, "/v1/models max_model_len"))
    return found


@tool("server.context_limit")
def context_limit(args: ContextLimitArgs) -> ContextLimit:
    """Ask the running server for its context limit (every endpoint that may state it)."""
    paths = [*FIELDS, "/v1/models"]
    answers = {p: _get(args.base_url + p, args.timeout_s) for p in paths}
    found = stated(answers, args.model)
    if not found:
        return ContextLimit(tokens=None, source=f"none of {', '.join(paths)} states a context limit")
    tokens, source = min(found)
    return ContextLimit(tokens=tokens, source=source)


def prompt_lengths(limit_tokens: int, max_tokens: int, per_stratum: int = 1) -> list[int]:
    """Prompt lengths (tokens) over the whole range a request may use, short, middle and as long
    as the limit allows once `max_tokens` are generated: `per_stratum` evenly inside each third
    (pure). The longest ends exactly at the limit, so its decode crosses the last positions."""
    top = limit_tokens - max_tokens
    if top < 1:
        raise ValueError(
            f"max_tokens {max_tokens} leaves no room for a prompt under the limit {limit_tokens}"
        )
    lengths = {
        max(1, round(top * (s + (i + 1) / (per_stratum + 1)) / 3))
        for s in range(3)
        for i in range(per_stratum)
    }
    return sorted(lengths | {top})


def stratified_lengths(limit_tokens: int, max_tokens: int, n: int, rng: random.Random) -> list[int]:
    """`n` prompt lengths over the whole range a request may use (pure given `rng`): the range from
    one token to `limit_tokens - max_tokens` cut into `n` equal strata, one length drawn in each,
    the last exactly at the top (its decode then crosses the limit's last positions)."""
    top = limit_tokens - max_tokens
    if top < 1:
        raise ValueError(
            f"max_tokens {max_tokens} leaves no room for a prompt under the context limit {limit_tokens}"
        )
    edges = [round(top * i / n) for i in range(n + 1)]
    drawn = [rng.randint(edges[i] + 1, max(edges[i] + 1, edges[i + 1])) for i in range(n - 1)]
    return sorted({*drawn, top})


@tool("server.fit_prompts")
def fit_prompts(args: FitArgs) -> FittedPrompts:
    """Word texts the server counts at `args.lengths` prompt tokens (chat template included), or
    as close below as its tokenizer allows: two probes give tokens per character and the
    template's share, then each text is cut and tried (one generated token per request)."""
    t0, sent = time.perf_counter(), 0
    rng = random.Random(args.seed)
    longest = max(args.lengths)
    texts = [text_of(rng, 8 * longest) for _ in args.lengths]  # ample: >= 1 token per 8 characters
    seen: dict[tuple[int, int], int] = {}

    def tokens(i: int, chars: int) -> int:
        """Prompt tokens of text i cut at `chars`; one more than the longest length where the
        server refuses it as too long (HTTP 400)."""
        nonlocal sent
        if (i, chars) in seen:
            return seen[i, chars]
        sent += 1
        try:
            usage = stream_completion(
                args.base_url, chat_body(args.model, texts[i][:chars], 1), args.timeout_s
            )[2]
        except ServerError as exc:
            if "HTTP 400" not in str(exc):
                raise
            seen[i, chars] = longest + 1
            return longest + 1
        count = usage.get("prompt_tokens")
        if not isinstance(count, int):
            raise ServerError(
                "the server reports no usage.prompt_tokens on a streamed chat request "
                "(stream_options.include_usage); long prompts cannot be fitted to its tokenizer"
            )
        seen[i, chars] = count
        return count

    last, c0 = len(texts) - 1, 16
    p0 = tokens(last, c0)
    # where one character is one token (byte-level) this is the longest length's own text
    c1 = max(c0 + 1, longest - p0 + c0)
    p1 = tokens(last, c1)
    if p1 > longest:  # more than a token per character of the probe's: at most one per character
        c1 = max(c0 + 1, longest - p0)
        p1 = tokens(last, c1)
    per_char = max((p1 - p0) / (c1 - c0), 1e-3)
    prompts, counted = [], []
    for i, want in enumerate(args.lengths):
        report(f"fitting long prompt {i + 1}/{len(args.lengths)} to {want} tokens")
        chars, near = max(1, math.floor(c0 + (want - p0) / per_char)), max(1, want // 200)
        best: tuple[int, int] | None = None  # (tokens, characters) of the longest text within `want`
        over = len(texts[i]) + 1  # the fewest characters found over `want`
        for _ in range(8):
            got = tokens(i, chars)
            if got > want:
                over = min(over, chars)
            elif best is None or got > best[0]:
                best = (got, chars)
            if want - near <= got <= want or (got > want and chars == 1):
                break
            step = max(1, math.floor(abs(want - got) / per_char))
            chars = min(chars - step if got > want else chars + step, over - 1)
            if chars < 1 or (best is not None and chars <= best[1]):
                break
        if best is None:  # the chat template alone is longer: the shortest text there is
            best = (tokens(i, 1), 1)
        prompts.append(texts[i][: best[1]])
        counted.append(best[0])
    return FittedPrompts(prompts=prompts, tokens=counted, requests=sent, duration_s=time.perf_counter() - t0)
