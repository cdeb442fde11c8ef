"""A scripted OpenAI-compatible Chat Completions server on 127.0.0.1 (standard library only).

Tests point the real `openai` client at it (OPENAI_BASE_URL) over real sockets. Each request takes
the next step of the script: a reply dict (`content`, `tool_calls` as (name, args) pairs,
`finish_reason`, token counts), a callable of the request body that returns one, or
`{"status": 500}` (and an optional `"message"`) for an HTTP error. Requests (bodies and Authorization headers) are kept: the
endpoint's request log.

`like` makes it behave as servers perfloop meets do: `"vllm"` refuses `tool_choice="auto"` with
vLLM's HTTP 400 (started without `--enable-auto-tool-choice`), taking no script step;
`"reasoning"` refuses `max_tokens` and `temperature` as OpenAI's reasoning models do, and puts a
`<think>` section (holding an edit block that must not be applied) before every reply's text.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Step = dict[str, Any] | Callable[[dict], dict[str, Any]]


def call(name: str, **args: Any) -> tuple[str, dict]:
    """A tool call in a scripted reply."""
    return (name, args)


def reply(content: str | None = None, *calls: tuple[str, dict], finish: str | None = None) -> dict[str, Any]:
    """A scripted reply: text, tool calls, finish reason."""
    return {"content": content, "tool_calls": list(calls), "finish_reason": finish}


THINK = (
    "<think>The user wants a patch. Maybe this:\nx.py\n<<<<<<< SEARCH\nimport os\n=======\n"
    "import sys\n>>>>>>> REPLACE\nNo, better read more.</think>\n"
)
"""Reasoning text a `reasoning` server puts first: its edit block must never be applied."""


def refusal(like: str, body: dict) -> str | None:
    """The HTTP 400 message a server of kind `like` answers this request with, or None (pure)."""
    if like == "vllm" and body.get("tool_choice") == "auto":
        return '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    if like == "reasoning" and "max_tokens" in body:
        return (
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead."
        )
    if like == "reasoning" and "temperature" in body:
        return "Unsupported value: 'temperature' does not support 0.0 with this model."
    return None


def completion(step: dict[str, Any], body: dict, n: int) -> dict[str, Any]:
    """The Chat Completions response body for a scripted step (pure)."""
    calls = [
        {"id": f"call_{n}_{k}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for k, (name, args) in enumerate(step.get("tool_calls") or [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
    if calls:
        message["tool_calls"] = calls
    finish = step.get("finish_reason") or ("tool_calls" if calls else "stop")
    prompt = step.get("prompt_tokens", len(json.dumps(body["messages"])) // 4)
    done = step.get("completion_tokens", 20 + len(step.get("content") or "") // 4)
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model", "?"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done},
    }


class ScriptedModel:
    """The server; `with ScriptedModel(script) as m:` gives `m.base_url` (ending in /v1)."""

    def __init__(self, script: list[Step], like: str = "openai") -> None:
        self.script = list(script)
        self.like = like
        self.requests: list[dict] = []
        self.auth: list[str] = []
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                status, payload = model.answer(self.path, body, self.headers.get("Authorization", ""))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, path: str, body: dict, auth: str) -> tuple[int, dict]:
        with self.lock:
            self.requests.append(body)
            self.auth.append(auth)
            n = len(self.requests)
            if path.rstrip("/") != "/v1/chat/completions":
                return 404, {"error": {"message": f"no route {path}", "type": "not_found"}}
            refused = refusal(self.like, body)
            if refused is not None:
                return 400, {"error": {"message": refused, "type": "BadRequestError", "code": 400}}
            if not self.script:
                return 500, {"error": {"message": "the test's script is exhausted", "type": "server_error"}}
            step = self.script.pop(0)
        if callable(step):
            step = step(body)
        if "status" in step:
            message = step.get("message", "scripted failure")
            return step["status"], {"error": {"message": message, "type": "server_error"}}
        if self.like == "reasoning" and step.get("content"):
            step = {**step, "content": THINK + step["content"]}
        return 200, completion(step, body, n)

    def __enter__(self) -> ScriptedModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def last_tool_text(body: dict) -> str:
    """The content of the last tool message of a request (what the model was just given)."""
    return next((m["content"] for m in reversed(body["messages"]) if m["role"] == "tool"), "")


def last_user_text(body: dict) -> str:
    """The content of the last user message of a request."""
    return next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
