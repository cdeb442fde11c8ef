"""The server's context limit, from the endpoints that state it: SGLang's `/get_model_info`
(`context_length`) and `/get_server_info` (`context_length`, `max_total_num_tokens`: the KV pool,
which also bounds one request), the demo server's `/get_server_info` (`context_len`), and an
OpenAI-compatible `/v1/models` (`max_model_len`, vLLM and the demo). The smallest stated value is
the limit; a server that states none gives `tokens = None` and says so.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from state.limits import ContextLimit, ContextLimitArgs
from tools.door import tool

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
