"""Streamed chat completions at temperature 0 over HTTP, timed per token (TTFT, inter-token gaps),
as sglang's bench_serving does."""

from __future__ import annotations

import http.client
import itertools
import json
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

from state.measurement.measure import RequestRecord
from tools.errors import ConfigError, ServerError


def chat_body(model: str, prompt: str, max_tokens: int) -> dict:
    """A streamed, greedy chat completion request (pure)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def sse_data(lines: Iterator[bytes]) -> Iterator[dict]:
    """Parse `data: {...}` lines of a server-sent event stream until `data: [DONE]` (pure)."""
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


def stream_completion(
    base_url: str, body: dict, timeout_s: float, on_first: Callable[[], None] | None = None
) -> tuple[list[float], str, dict]:
    """Send one streamed request; return (arrival time of each content delta, text, usage);
    `on_first` is called when its first content delta arrives."""
    url = urlsplit(base_url)
    if not url.hostname:
        raise ConfigError(f"server URL {base_url!r} names no host; use http://HOST:PORT")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
    try:
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise ServerError(
                f"completion request failed with HTTP {resp.status}: "
                f"{resp.read().decode(errors='replace')[:200]}"
            )
        arrivals: list[float] = []
        parts: list[str] = []
        usage: dict = {}
        for event in sse_data(iter(resp.readline, b"")):
            for choice in event.get("choices") or []:
                content = (choice.get("delta") or {}).get("content")
                if content:
                    if not arrivals and on_first is not None:
                        on_first()
                    arrivals.append(time.perf_counter() - t0)
                    parts.append(content)
            usage = event.get("usage") or usage
        return arrivals, "".join(parts), usage
    except (OSError, http.client.HTTPException) as exc:
        raise ServerError(f"completion request to {base_url} failed: {exc}") from exc
    finally:
        conn.close()


def to_record(
    prompt_index: int, arrivals: list[float], text: str, usage: dict | None = None
) -> RequestRecord:
    """Per-request timing record from delta arrival times in seconds (pure).

    Tokens are the server's count (`usage.completion_tokens`, asked for with `include_usage`) where
    it gives one: a server may put several tokens in one delta (vLLM merges the deltas of a request
    whose stream the API server has not sent yet, under load), and counting deltas would then
    undercount what it generated. Without usage, one token per delta."""
    if not arrivals:
        raise ServerError(f"prompt {prompt_index}: the server streamed no tokens")
    itl = [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
    counted = (usage or {}).get("completion_tokens")
    tokens = counted if isinstance(counted, int) and counted >= len(arrivals) else len(arrivals)
    return RequestRecord(
        prompt_index=prompt_index,
        ttft_ms=arrivals[0] * 1000,
        itl_ms=itl,
        text=text,
        completion_tokens=tokens,
    )
