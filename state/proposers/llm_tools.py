"""The LLM proposer's door calls: the model call's messages, arguments and reply, and the read-only
repo tools' and the probe's arguments and results (recorded like every door call)."""

from pathlib import Path
from typing import Literal

from pydantic import Field

from state.base import Model


class ChatToolCall(Model):
    """A function call the model asked for."""

    id: str
    """The call id the tool's reply must name."""
    name: str
    """Function name."""
    arguments: str
    """Arguments as the JSON text the model wrote (validated by perfloop, not by the server)."""


class ChatMessage(Model):
    """One message of a Chat Completions conversation."""

    role: Literal["system", "user", "assistant", "tool"]
    """Who speaks."""
    content: str | None = None
    """Text (None for an assistant message that only calls tools)."""
    tool_calls: list[ChatToolCall] = Field(default_factory=list)
    """Function calls of an assistant message."""
    tool_call_id: str | None = None
    """For a `tool` message: the call it answers."""


class ChatArgs(Model):
    """One Chat Completions request (`llm.chat`)."""

    base_url: str | None
    """Endpoint; None: the client's default (OpenAI, or $OPENAI_BASE_URL)."""
    api_key_env: str
    """Environment variable the key is read from at call time (the name only)."""
    model: str
    """Model name."""
    messages: list[ChatMessage]
    """The conversation so far."""
    tools: list[dict]
    """Function tool definitions (JSON schema), non-strict, sent with `tool_choice="auto"`; empty:
    neither is sent (the text protocol, for a server that refuses them)."""
    max_tokens: int
    """Most completion tokens."""
    token_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """The request field `max_tokens` is sent as (reasoning models take only the second)."""
    temperature: float | None
    """Sampling temperature; None: not sent (reasoning models refuse it)."""
    timeout_s: float
    """Per-request timeout."""
    retries: int
    """Retries of failed requests."""


class ChatReply(Model):
    """The model's answer to one request."""

    content: str | None
    """Text of the reply."""
    tool_calls: list[ChatToolCall]
    """Function calls asked for."""
    finish_reason: str
    """`stop`, `tool_calls`, `length`, ..."""
    prompt_tokens: int = Field(ge=0)
    """Prompt tokens charged."""
    completion_tokens: int = Field(ge=0)
    """Completion tokens charged (reasoning included)."""
    model: str
    """The model that answered, as the endpoint names it."""
    duration_s: float = Field(ge=0)
    """Wall time of the request, retries included, in seconds."""


class CodeArgs(Model):
    """A read-only look at the target repo (`code.read_file`, `code.grep`, `code.list_dir`)."""

    repo: Path
    """The target repo on its host."""
    path: str = "."
    """Repo-relative path (file or folder)."""
    start_line: int | None = None
    """read_file: first line, 1-based."""
    end_line: int | None = None
    """read_file: last line, inclusive."""
    pattern: str | None = None
    """grep: a Python regular expression."""
    traced_line: int | None = None
    """read_file: instead of start/end, six lines either side of this line of the file as the
    profiler saw it (perfloop's instrumentation lines counted), e.g. a hot call site."""


class CodeResult(Model):
    """What a read-only tool found, or why it refused."""

    ok: bool
    """False when the request was refused (outside the repo, .git, missing, bad pattern)."""
    text: str
    """The answer as the model sees it."""


class FilesArgs(Model):
    """Several repo files to read whole (`code.read_texts`)."""

    repo: Path
    """The target repo on its host."""
    paths: list[str]
    """Repo-relative paths."""


class DiffArgs(Model):
    """A diff to check against the repo (`code.check_diff`)."""

    repo: Path
    """The target repo on its host."""
    diff: str
    """Unified diff with a/ b/ prefixes."""


class LogArgs(Model):
    """The end of a server log perfloop wrote (`code.log_tail`: a crashed candidate's traceback)."""

    path: Path
    """The log file on the session's host."""
    lines: int = Field(30, ge=1, le=200)
    """Last lines to return."""


class ProbeArgs(Model):
    """One run of the target's probe on a candidate patch (`code.probe`)."""

    repo: Path
    """The target repo on its host (its HEAD is checked out in a scratch worktree)."""
    diff: str
    """The candidate patch (unified diff, a/ b/ prefixes), applied in the worktree."""
    argv: list[str]
    """The command, `{python}` already substituted."""
    timeout_s: float
    """Wall time of the run."""
    drop_env: list[str] = Field(default_factory=list)
    """Environment variables the command does not get (the model endpoint's key)."""


class ProbeResult(Model):
    """What a probe run showed."""

    applied: bool
    """Whether the patch applied in the worktree (False: the command did not run)."""
    exit_code: int | None
    """The command's exit status; None when it did not run or was killed at the time limit."""
    timed_out: bool = False
    """Killed at `timeout_s`."""
    seconds: float = Field(0.0, ge=0)
    """Wall time of the command."""
    output: str = ""
    """The end of its output (stdout and stderr together), bounded, secrets masked; or why it did
    not run."""


class FileTexts(Model):
    """Files' texts, as a patch will meet them."""

    texts: dict[str, str | None]
    """Path -> text; None when missing, not a file, or refused."""
