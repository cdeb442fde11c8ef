"""How the conversation talks to a given OpenAI-compatible server (pure).

Servers differ: vLLM refuses `tool_choice="auto"` unless started with `--enable-auto-tool-choice
--tool-call-parser`; reasoning models refuse `max_tokens` (they take `max_completion_tokens`) and
a temperature; many put `<think>` sections before the answer. The first request is the probe:
when the endpoint refuses it with HTTP 400 naming one of these, `adapt` gives the settings that
avoid it and the conversation asks again (each request, the refused ones included, is a recorded
door call, so a replay adapts the same way). Without function tools the model asks for files in
plain text (`text_requests`), and the hot source lines are in the first message anyway; a
server without a tool-call parser (SGLang, vLLM) leaves `<tool_call>{...}</tool_call>` in the text,
answered the same way.
Reasoning text is removed before anything is parsed (`strip_reasoning`). The conversation is
kept within a token budget per call by trimming the oldest tool outputs (`trim`); an endpoint's
context-length refusal halves the budget and asks again (`too_long`).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, replace
from typing import Literal

from state.proposers.llm_tools import ChatMessage

MAX_ADAPTATIONS = 3
"""Refused requests a conversation adapts to before it gives up."""

TEXT_TOOLS = """
This server takes no function tools. To read the repository, answer with request lines only, one
per line, and nothing else; the results come in the next message:
READ path/relative/to/repo.py [start_line end_line]
GREP 'python regular expression' [path]
LIST [folder]
"""

CHARS_PER_TOKEN = 4
"""The estimate of characters per token the budget uses (no tokenizer: the model is unknown)."""
KEEP_RECENT = 2
"""Tool outputs (or text-protocol results) never trimmed: the latest ones."""
_TOO_LONG = re.compile(
    r"context.length|context window|maximum context|too many tokens|prompt is too long", re.I
)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)\s*", re.S)
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
TEXT_TOOL_NAMES = ("read_file", "grep", "list_dir")
PROBE = "PROBE"
"""The text protocol's first line asking for the probe on the edit blocks that follow."""
_REQUEST = re.compile(r"^\s*(READ|GREP|LIST)\b(.*)$", re.M)


@dataclass(frozen=True)
class Wire:
    """What the requests send: function tools or the text protocol, the reply-length field, a
    temperature or none."""

    tools: bool = True
    token_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    temperature: bool = True


def adapt(error: str, wire: Wire) -> tuple[Wire, str] | None:
    """The settings that avoid what an HTTP 400 answer refused, and a note saying what changed;
    None when the refusal is not one of those (pure)."""
    if "HTTP 400" not in error:
        return None
    low = error.lower()
    if wire.tools and ("tool_choice" in low or "tool choice" in low or "tools" in low):
        return replace(wire, tools=False), "function tools refused: text protocol"
    if wire.token_param == "max_tokens" and "max_completion_tokens" in low:
        return replace(wire, token_param="max_completion_tokens"), "max_tokens refused"
    if wire.temperature and "temperature" in low:
        return replace(wire, temperature=False), "temperature refused"
    return None


def strip_reasoning(text: str | None) -> str:
    """The reply without its `<think>` sections (an unclosed one runs to the end), and without a
    stray leading `</think>` (servers that drop the opening tag) (pure)."""
    text = _THINK.sub("", text or "")
    _, sep, tail = text.partition("</think>")
    return tail.lstrip() if sep else text


def text_requests(content: str) -> list[tuple[str, dict]]:
    """The `READ`/`GREP`/`LIST` lines of a text-protocol reply, or the `<tool_call>{...}</tool_call>`
    elements a server without a tool-call parser leaves in the text (SGLang, vLLM), as (tool,
    arguments) (pure); none when the reply holds edit blocks (it is an answer, not a request),
    unless it asks for the probe on them: a first line `PROBE`, or a `run_probe` tool call."""
    first, _, rest = content.lstrip().partition("\n")
    if first.strip() == PROBE:
        return [("run_probe", {"edits": rest})]
    out: list[tuple[str, dict]] = []
    for raw in _TOOL_CALL.findall(content):
        try:
            call = json.loads(raw)
            given = call.get("arguments", call.get("parameters", {}))
            given = json.loads(given) if isinstance(given, str) else given
        except (ValueError, AttributeError):
            continue
        if isinstance(given, dict) and call.get("name") in (*TEXT_TOOL_NAMES, "run_probe"):
            out.append((call["name"], given))
    if "<<<<<<< SEARCH" in content:
        return [c for c in out if c[0] == "run_probe"]
    if out:
        return out
    for verb, rest in _REQUEST.findall(content):
        try:
            words = shlex.split(rest)
        except ValueError:
            words = rest.split()
        if verb == "READ" and words:
            args: dict[str, object] = {"path": words[0]}
            if len(words) >= 3 and words[1].isdigit() and words[2].isdigit():
                args |= {"start_line": int(words[1]), "end_line": int(words[2])}
            out.append(("read_file", args))
        elif verb == "GREP" and words:
            out.append(("grep", {"pattern": words[0], "path": words[1] if len(words) > 1 else "."}))
        elif verb == "LIST":
            out.append(("list_dir", {"path": words[0] if words else "."}))
    return out


def too_long(error: str) -> bool:
    """Whether an endpoint's answer refuses the request for its length (pure)."""
    return ("HTTP 400" in error or "HTTP 413" in error) and _TOO_LONG.search(error) is not None


def size(messages: list[ChatMessage]) -> int:
    """Estimated tokens of a conversation (pure)."""
    chars = sum(
        len(m.content or "") + sum(len(c.arguments) + len(c.name) for c in m.tool_calls) for m in messages
    )
    return chars // CHARS_PER_TOKEN


def trim(messages: list[ChatMessage], budget: int) -> tuple[list[ChatMessage], int]:
    """The conversation within `budget` estimated tokens, the oldest tool outputs (and text-protocol
    results) replaced by a one-line note, the latest `KEEP_RECENT` kept; and how many were trimmed.
    The system and first user messages, the model's own messages and repair requests are kept, so
    it may not fit (pure)."""
    out = list(messages)
    results = [k for k, m in enumerate(out) if k > 1 and _is_result(m)]
    trimmed = 0
    for k in results[: max(len(results) - KEEP_RECENT, 0)]:
        if size(out) <= budget:
            break
        m = out[k]
        first = (m.content or "").split("\n", 1)[0][:120]
        note = f"[output trimmed to fit the context: {first} ... read it again if you need it]"
        out[k] = m.model_copy(update={"content": note})
        trimmed += 1
    return out, trimmed


def _is_result(m: ChatMessage) -> bool:
    return m.role == "tool" or (
        m.role == "user"
        and (m.content or "").startswith(("read_file {", "grep {", "list_dir {", "run_probe {"))
    )
