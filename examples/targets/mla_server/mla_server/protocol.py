"""Request validation and OpenAI-shaped response bodies."""

import json
import time
import uuid
from dataclasses import dataclass


class APIError(Exception):
    """An error returned to the client as an OpenAI-style body."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        """`{"error": {...}}` as OpenAI sends it."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, param: str | None = None) -> APIError:
    """A 400 invalid_request_error."""
    return APIError(400, message, param=param, code="invalid_value")


@dataclass
class ChatRequest:
    """A validated /v1/chat/completions request."""

    messages: list[dict]
    max_tokens: int
    temperature: float
    seed: int | None
    stop: list[str]
    stream: bool
    include_usage: bool


@dataclass
class GenerateRequest:
    """A validated SGLang-native `/generate` request (text in, text out, no chat template)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    seed: int | None
    stop: list[str]
    stream: bool


@dataclass
class CompletionRequest:
    """A validated /v1/completions request (text in, no chat template).

    `echo` with `max_tokens: 0` scores the prompt: `logprobs` (0-20) top alternatives and the
    prompt tokens' own log-probabilities, OpenAI-shaped. With `max_tokens` > 0, `logprobs` gives
    the generated tokens' (over the printable ids the server samples from); `echo` then is a 400."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    seed: int | None
    stop: list[str]
    echo: bool
    logprobs: int | None


def parse_json_object(raw: bytes) -> dict:
    """Decode a JSON object body or raise a 400."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request(f"malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body


def field_of(body: dict, name: str, types: tuple, default=None):
    """`body[name]` if present and of one of `types` (bool is not an int), else a 400."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        names = "/".join(t.__name__ for t in types)
        raise bad_request(f"'{name}' must be of type {names}, got {type(value).__name__}", name)
    return value


def _message(m) -> dict:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise bad_request("each message must be an object with a string 'role'", "messages")
    content = m.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
            raise bad_request("content parts must be objects with a string 'text'", "messages")
        content = "".join(p["text"] for p in content)
    if not isinstance(content, str):
        raise bad_request("message 'content' must be a string or a list of text parts", "messages")
    return {"role": m["role"], "content": content}


def _max_tokens(value: int | None, default: int, limit: int, name: str) -> int:
    value = default if value is None else value
    if not 1 <= value <= limit:
        raise bad_request(f"'{name}' must be between 1 and {limit}, got {value}", name)
    return value


def _temperature(body: dict) -> float:
    temperature = float(field_of(body, "temperature", (int, float), 1.0))
    if not 0 <= temperature <= 2:
        raise bad_request(f"'temperature' must be between 0 and 2, got {temperature}", "temperature")
    return temperature


def _stop(body: dict) -> list[str]:
    stop = field_of(body, "stop", (str, list), [])
    stop = [stop] if isinstance(stop, str) else stop
    if not all(isinstance(s, str) and s for s in stop):
        raise bad_request("'stop' must be a non-empty string or a list of them", "stop")
    return stop


def parse_generate_request(body: dict, encode, max_tokens_limit: int,
                           default_max_tokens: int) -> GenerateRequest:
    """Validate a `/generate` body: `text` or `input_ids`, `sampling_params` (`max_new_tokens`,
    `temperature`, `stop`, `seed`; others such as `ignore_eos` accepted and ignored), `stream`."""
    text, ids = field_of(body, "text", (str,)), field_of(body, "input_ids", (list,))
    if (text is None) == (ids is None):
        raise bad_request("give exactly one of 'text' (a string) or 'input_ids' (token ids)", "text")
    if ids is not None and not (ids and all(isinstance(i, int) and 0 <= i < 256 for i in ids)):
        raise bad_request("'input_ids' must be a non-empty list of token ids in [0, 256)", "input_ids")
    params = field_of(body, "sampling_params", (dict,), {})
    return GenerateRequest(
        prompt_ids=encode(text) if text is not None else ids,
        max_tokens=_max_tokens(field_of(params, "max_new_tokens", (int,)), default_max_tokens,
                               max_tokens_limit, "max_new_tokens"),
        temperature=_temperature(params), seed=field_of(params, "seed", (int,)), stop=_stop(params),
        stream=field_of(body, "stream", (bool,), False))


def parse_completion_request(body: dict, encode, max_tokens_limit: int,
                             default_max_tokens: int) -> CompletionRequest:
    """Validate a completions body: `prompt` (a string), `max_tokens`, `echo`, `logprobs`,
    `temperature`, `seed`, `stop`; streaming is not offered here (a 400)."""
    prompt = field_of(body, "prompt", (str,))
    if not prompt:
        raise bad_request("'prompt' must be a non-empty string", "prompt")
    if field_of(body, "stream", (bool,), False):
        raise bad_request("the demo server's /v1/completions does not stream; use "
                          "/v1/chat/completions or /generate to stream", "stream")
    echo = field_of(body, "echo", (bool,), False)
    logprobs = field_of(body, "logprobs", (int,))
    if logprobs is not None and not 0 <= logprobs <= 20:
        raise bad_request(f"'logprobs' must be between 0 and 20, got {logprobs}", "logprobs")
    max_tokens = field_of(body, "max_tokens", (int,), default_max_tokens)
    if max_tokens == 0 and not echo:
        raise bad_request("'max_tokens' 0 needs 'echo': true (scoring the prompt)", "max_tokens")
    if max_tokens != 0:
        max_tokens = _max_tokens(max_tokens, default_max_tokens, max_tokens_limit, "max_tokens")
        if logprobs is not None and echo:
            raise bad_request("the demo server returns the prompt's logprobs only when scoring it "
                              "('echo': true, 'max_tokens': 0); drop 'echo' for the generated "
                              "tokens' logprobs", "logprobs")
    return CompletionRequest(prompt_ids=encode(prompt), max_tokens=max_tokens,
                             temperature=_temperature(body), seed=field_of(body, "seed", (int,)),
                             stop=_stop(body), echo=echo, logprobs=logprobs)


def completion_logprobs(token_texts: list[str], token_logprobs: list[float | None],
                        top: list[list[tuple[str, float]] | None]) -> dict:
    """OpenAI's `logprobs` object of a text completion (pure): `tokens`, `token_logprobs`,
    `top_logprobs` (a dict per position; null where there is no context), `text_offset`."""
    offsets, at = [], 0
    for t in token_texts:
        offsets.append(at)
        at += len(t)
    return {"tokens": token_texts, "token_logprobs": token_logprobs,
            "top_logprobs": [None if alts is None else dict(alts) for alts in top],
            "text_offset": offsets}


def parse_chat_request(body: dict, max_tokens_limit: int, default_max_tokens: int) -> ChatRequest:
    """Validate a chat completion body; unknown fields are ignored, wrong types are a 400."""
    messages = field_of(body, "messages", (list,))
    if not messages:
        raise bad_request("'messages' must be a non-empty list", "messages")
    max_tokens = field_of(body, "max_tokens", (int,))
    max_tokens = field_of(body, "max_completion_tokens", (int,), max_tokens)
    options = field_of(body, "stream_options", (dict,), {})
    return ChatRequest(
        messages=[_message(m) for m in messages],
        max_tokens=_max_tokens(max_tokens, default_max_tokens, max_tokens_limit, "max_tokens"),
        temperature=_temperature(body),
        seed=field_of(body, "seed", (int,)),
        stop=_stop(body),
        stream=field_of(body, "stream", (bool,), False),
        include_usage=field_of(options, "include_usage", (bool,), False),
    )


def generate_body(rid: str, text: str, prompt_tokens: int, completion_tokens: int,
                  finish_reason: str | None) -> dict:
    """A `/generate` response, or one streamed event of it: the text so far, as SGLang sends it."""
    finish = None if finish_reason is None else {"type": finish_reason}
    return {"text": text, "meta_info": {"id": rid, "prompt_tokens": prompt_tokens,
                                        "completion_tokens": completion_tokens,
                                        "finish_reason": finish}}


class ResponseBuilder:
    """OpenAI response bodies for one completion id."""

    def __init__(self, model: str):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.model = model
        self.created = int(time.time())

    def _base(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    @staticmethod
    def usage(prompt_tokens: int, completion_tokens: int) -> dict:
        """The `usage` object."""
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def text_completion(self, text: str, finish_reason: str, usage: dict,
                        logprobs: dict | None) -> dict:
        """A non-streamed text_completion (/v1/completions)."""
        choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
        base = self._base("text_completion") | {"id": self.id.replace("chatcmpl-", "cmpl-")}
        return {**base, "choices": [choice], "usage": usage}

    def completion(self, text: str, finish_reason: str, usage: dict) -> dict:
        """A non-streamed chat.completion."""
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish_reason}
        return {**self._base("chat.completion"), "choices": [choice], "usage": usage}

    def chunk(self, delta: dict, finish_reason: str | None = None) -> dict:
        """A streamed chat.completion.chunk with one choice."""
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base("chat.completion.chunk"), "choices": [choice]}

    def usage_chunk(self, usage: dict) -> dict:
        """The final streamed chunk when stream_options.include_usage is set."""
        return {**self._base("chat.completion.chunk"), "choices": [], "usage": usage}
