"""The long prompts' fit on a server whose tokenizer is not one token per character: a small
HTTP server counting about one token per word (BPE-like), with a chat template, that refuses a
request past its limit with HTTP 400 as SGLang does."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from state.engines.limits import FitArgs
from tools.client.stream import chat_body, stream_completion
from tools.errors import ServerError
from tools.limits import fit_prompts

LIMIT = 512
TEMPLATE = 11  # tokens of the chat template around the message


def count(text: str) -> int:
    """A word is a token, and so is each run of 4 letters past its first 4 (pure)."""
    return TEMPLATE + sum(1 + (len(w) - 1) // 4 for w in re.findall(r"\S+", text))


class Chat(BaseHTTPRequestHandler):
    requests: list[int] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = count(body["messages"][0]["content"])
        Chat.requests.append(prompt)
        if prompt + body["max_tokens"] > LIMIT:
            self.send_response(400)
            self.end_headers()
            self.wfile.write(b'{"error": "too long"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = body["max_tokens"]
        events: list[dict] = [{"choices": [{"delta": {"content": "x"}}]} for _ in range(n)]
        events.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": n}})
        for e in events:
            self.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_texts_fit_a_word_tokenizer_within_its_limit(url: str) -> None:
    Chat.requests = []
    lengths = [60, 250, 472]
    fit = fit_prompts(FitArgs(base_url=url, model="m", lengths=lengths, seed=3))
    assert fit.requests == len(Chat.requests) <= 2 + 8 * len(lengths)
    assert [count(p) for p in fit.prompts] == fit.tokens
    for want, got in zip(lengths, fit.tokens, strict=True):
        assert want - max(1, want // 200) - 2 <= got <= want, (lengths, fit.tokens)  # a word may be 2 tokens
    # the longest, with the 40 tokens the correctness set generates, is served at the limit's edge
    _, text, usage = stream_completion(url, chat_body("m", fit.prompts[-1], 40), 10)
    assert usage["prompt_tokens"] + 40 <= LIMIT and len(text) == 40
    with pytest.raises(ServerError, match="HTTP 400"):
        stream_completion(url, chat_body("m", fit.prompts[-1] + " cache cache", 40), 10)
