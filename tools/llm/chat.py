"""`llm.chat`: one Chat Completions request to an OpenAI-compatible endpoint (openai client).

The key is read from the environment variable the args name, at call time: it is never an
argument, so it is never recorded. Function tools are sent non-strict (many OpenAI-compatible
servers do not honour strict schemas); perfloop validates the arguments itself. Retries of
connection errors, 408/409/429 and 5xx are the client's own (with backoff), bounded by `retries`.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, cast

from state.proposers.llm_tools import ChatArgs, ChatMessage, ChatReply, ChatToolCall
from state.proposers.proposer import cleartext_refusal, key_env_refusal
from tools import secrets
from tools.door import tool
from tools.errors import LlmError
from tools.progress import report

LOCAL_KEY = "not-needed"
"""Sent to an explicit non-OpenAI endpoint when no key is set (the client refuses to send none)."""


def wire_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation as the Chat Completions API takes it (pure)."""
    out = []
    for m in messages:
        msg: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        if m.tool_call_id is not None:
            msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


def request_fields(args: ChatArgs) -> dict[str, Any]:
    """The request's fields besides the model: the messages, tools only when there are any, the
    reply-length field the endpoint takes, a temperature only when one is set (pure)."""
    fields: dict[str, Any] = {"messages": wire_messages(args.messages), args.token_param: args.max_tokens}
    if args.tools:
        fields |= {"tools": args.tools, "tool_choice": "auto"}
    if args.temperature is not None:
        fields["temperature"] = args.temperature
    return fields


def api_key(args: ChatArgs) -> str:
    """The key from the environment, or a placeholder for a local endpoint; LlmError if none fits,
    if the variable is not named like a key, or if the key would go in clear to another machine."""
    key = os.environ.get(args.api_key_env, "")
    base = args.base_url or os.environ.get("OPENAI_BASE_URL") or ""
    refused = key_env_refusal(args.api_key_env) or (
        cleartext_refusal(base, args.api_key_env) if key else None
    )
    if refused is not None:
        raise LlmError(refused)
    if key:
        secrets.register(key)  # masked in anything written, whatever the variable is called
        return key
    if base and "api.openai.com" not in base:
        return LOCAL_KEY
    raise LlmError(
        f"no API key: export {args.api_key_env} (or point --base-url at a local OpenAI-compatible server)"
    )


@tool("llm.chat", where="local", reuse=True)
def chat(args: ChatArgs) -> ChatReply:
    """Send the conversation; the reply's text, tool calls, finish reason and token usage."""
    import openai  # here, not at import: nodes never import openai, and hosts never need it
    from openai.types.chat import ChatCompletionMessageFunctionToolCall

    client = openai.OpenAI(
        base_url=args.base_url, api_key=api_key(args), max_retries=args.retries, timeout=args.timeout_s
    )
    t0 = time.perf_counter()
    report(f"model {args.model}: waiting for a reply ({len(args.messages)} messages in the conversation)")
    try:
        # plain JSON dicts: the SDK's TypedDicts describe the same wire format
        resp = client.chat.completions.create(model=args.model, **cast(Any, request_fields(args)))
    except openai.APIStatusError as exc:
        raise LlmError(f"model endpoint answered HTTP {exc.status_code}: {_status_message(exc)}") from None
    except openai.APIConnectionError as exc:
        raise LlmError(f"model endpoint unreachable: {_first_line(str(exc))}") from None
    except openai.OpenAIError as exc:
        raise LlmError(f"model call failed: {type(exc).__name__}: {_first_line(str(exc))}") from None
    finally:
        client.close()
    if not resp.choices:
        raise LlmError("model endpoint answered with no choices")
    choice, usage = resp.choices[0], resp.usage
    calls = [  # function tool calls only: custom tool calls carry no function
        ChatToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
        for c in choice.message.tool_calls or []
        if isinstance(c, ChatCompletionMessageFunctionToolCall)
    ]
    return ChatReply(
        content=choice.message.content,
        tool_calls=calls,
        finish_reason=choice.finish_reason or "stop",
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        model=resp.model or args.model,
        duration_s=time.perf_counter() - t0,
    )


def _status_message(exc: Any) -> str:
    """The error message an endpoint sent (`{"error": {"message": ...}}` or plain), one line."""
    body = exc.body
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict) and err.get("message"):
        return _first_line(str(err["message"]))
    return _first_line(err if isinstance(err, str) else exc.message)


def _first_line(text: str) -> str:
    """The message's first line, without the client's `Error code: NNN - ` prefix (pure)."""
    text = re.sub(r"^Error code: \d+ - ", "", (text or "").strip())
    return text.splitlines()[0][:300] if text else "(no message)"
