"""The LLM proposer: its settings, the model call and the read-only repo tools it offers the model.

A model is reached over the OpenAI Chat Completions protocol with function tools. Each model call
and each read-only tool call is a door call, so it is recorded and a replay answers it offline.
The API key is never a field here: it is read from the environment at call time.
"""

import ipaddress
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from state.base import Model
from state.proposers.llm_tools import ChatReply

ProposerMode = Literal["playbook", "llm", "auto", "search", "chain"]

DEFAULT_PROTECTED = [
    "tests/**",
    "test/**",
    "**/tests/**",
    "**/test/**",
    "**/test_*.py",
    "**/*_test.py",
    "**/conftest.py",
    "benchmarks/**",
    "benchmark/**",
    "**/benchmarks/**",
    "**/bench_*.py",
]
"""Paths a model may not edit: the target's tests and benchmarks (it must not edit its judges)."""

KEY_ENV = re.compile(r"[A-Z][A-Z0-9_]*_(KEY|TOKEN)")
"""What `api_key_env` may name: a variable named like an API key (`OPENAI_API_KEY`, `HF_TOKEN`)."""
NOT_KEYS = re.compile(r"^PERFLOOP_|SECRET|PASSWORD|PASSPHRASE|CREDENTIAL")
"""...but none of perfloop's own (`PERFLOOP_SERVE_TOKEN`) nor one named for another kind of secret."""


def key_env_refusal(name: str) -> str | None:
    """Why `name` may not be `api_key_env` (its value is sent to the endpoint as a Bearer token),
    or None (pure)."""
    if KEY_ENV.fullmatch(name) and not NOT_KEYS.search(name):
        return None
    return (
        f"api_key_env {name!r} does not name an API key: its value is sent to the model endpoint, so it "
        "must be a variable like OPENAI_API_KEY or HF_TOKEN (upper case, ending in _KEY or _TOKEN, "
        "not PERFLOOP_*)"
    )


def cleartext_refusal(base_url: str | None, key_env: str) -> str | None:
    """Why a key may not be sent to `base_url`: a plain `http://` endpoint that is not this machine
    (the key would cross the network in clear), or None (pure)."""
    parts = urlsplit(base_url or "")
    if parts.scheme != "http":
        return None
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (
        f"model endpoint {base_url} is plain http:// to another machine: ${key_env} would travel in clear; "
        "use https://, an SSH tunnel to 127.0.0.1, or unset the key for a keyless server"
    )


class ProbeConfig(Model):
    """`[proposer.probe]`: a quick check the model may run on its candidate patch before it answers
    (a unit test, an equivalence harness), in a scratch git worktree of the target repo. The
    worktree keeps the session's tree untouched; it is no security sandbox: the command runs the
    model's code on the target's host before any approval."""

    argv: list[str] = Field(min_length=1)
    """The command, run in the worktree's root (`{python}`: perfloop's interpreter on the target's
    host), e.g. `["{python}", "-m", "pytest", "-q", "tests/test_backend.py"]`; exit code 0 means
    the check passed."""
    timeout_s: float = Field(120.0, gt=0, le=3600)
    """Wall time of one run; past it the command's process group is killed."""
    max_runs: int = Field(3, ge=1, le=20)
    """Runs per proposal (a conversation): the model is told when they are used up."""


class ProposerConfig(Model):
    """`[proposer]` in a target file; the command line overrides each field."""

    mode: ProposerMode = "auto"
    """`playbook`: stored patches only, never a model; `llm`: a model writes every patch (playbooks
    still diagnose); `auto`: a playbook's patch when one fits, else the model; `search`: launch
    configs of `[search]` only (agent/proposer/tuning/search.py; under `playbook` and `auto` the search
    follows the playbooks); `chain`: the playbooks' patches and launch changes and the search's trial
    ranked together by predicted gain per launch-minute, the model last, and two or more kept changes
    measured together against the baseline at the end (agent/proposer/chain.py, agent/steps/chain.py)."""
    model: str | None = None
    """Model name sent to the endpoint (needed for `llm`, and for `auto` to fall back to a model)."""
    base_url: str | None = None
    """OpenAI-compatible endpoint (`http://127.0.0.1:8000/v1`); None: $OPENAI_BASE_URL, else OpenAI."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (its value is never stored); named like
    a key (`*_KEY`, `*_TOKEN`: `key_env_refusal`)."""
    approve: Literal["manual", "auto"] = "manual"
    """Model-written patches: `manual` pauses for `perfloop approve` even under `--approve auto`;
    `auto` follows `--approve` (the target trusts the model to change its tree unasked)."""
    max_steps: int = Field(12, ge=1)
    """Model calls per proposal (tool rounds and repairs included)."""
    max_tokens: int = Field(200_000, ge=1)
    """Prompt plus completion tokens for the whole session."""
    max_seconds: float = Field(600.0, gt=0)
    """Model time per proposal: the summed duration of its model calls, in seconds (recorded, so a
    replay stops where the run stopped)."""
    max_repairs: int = Field(3, ge=0)
    """Rounds in which a failed edit is sent back with the reason before the proposal is dropped."""
    max_proposals: int = Field(3, ge=1)
    """Model rounds per iteration: a rejected or dropped candidate is followed by another round,
    told what happened to every earlier one (its diff, verdict, speedup, where outputs diverged)."""
    reply_tokens: int = Field(8192, ge=16)
    """`max_tokens` of each model reply (the real SGLang fix takes about 6k tokens as blocks)."""
    context_tokens: int = Field(60_000, ge=1000)
    """Estimated prompt tokens per call: older tool outputs are trimmed to fit; a context-length
    refusal from the endpoint halves it and asks again."""
    temperature: float = Field(0.0, ge=0, le=2)
    """Sampling temperature."""
    timeout_s: float = Field(300.0, gt=0)
    """Per-request timeout."""
    retries: int = Field(2, ge=0, le=10)
    """Retries of a failed request (connection errors, 408/409/429/5xx), with backoff."""
    protected: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED))
    """Glob patterns (repo-relative) of files a model may not edit, besides `.git` and the profiler
    instrumentation."""
    probe: ProbeConfig | None = None
    """A check command the model may run on its candidate (`run_probe`); None: no such tool."""
    launch_options: bool = False
    """Whether the model may answer with launch options (`LAUNCH: set --flag value` lines) instead
    of edit blocks: the candidate is the server relaunched with them, no code changed."""
    launch_flags: list[str] = Field(default_factory=list)
    """Launch flags the model may change besides its target kind's allowlist
    (playbooks/flags.py), each spelled in full (`--my-flag`); where the server listens and what
    model and code it loads are never changeable, whatever is listed here."""

    @field_validator("api_key_env")
    @classmethod
    def _a_key(cls, name: str) -> str:
        refused = key_env_refusal(name)
        if refused is not None:
            raise ValueError(refused)
        return name

    @field_validator("base_url")
    @classmethod
    def _no_credentials(cls, url: str | None) -> str | None:
        """An http(s) URL without user:password (the key comes from the environment)."""
        if url is None:
            return None
        if not url.startswith(("http://", "https://")) or "@" in url.split("/")[2]:
            raise ValueError(f"{url!r} must be an http(s) URL without credentials")
        return url.rstrip("/")


class LlmUsage(Model):
    """Tokens and calls spent on models."""

    calls: int = 0
    """Model calls."""
    prompt_tokens: int = 0
    """Prompt tokens."""
    completion_tokens: int = 0
    """Completion tokens."""
    seconds: float = 0.0
    """Summed duration of the calls, in seconds."""

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def plus(self, reply: ChatReply) -> "LlmUsage":
        """This usage with one more reply counted."""
        return LlmUsage(
            calls=self.calls + 1,
            prompt_tokens=self.prompt_tokens + reply.prompt_tokens,
            completion_tokens=self.completion_tokens + reply.completion_tokens,
            seconds=self.seconds + reply.duration_s,
        )

    def add(self, other: "LlmUsage") -> "LlmUsage":
        """The sum of two usages."""
        return LlmUsage(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            seconds=self.seconds + other.seconds,
        )


class LlmOrigin(Model):
    """Where a model-written proposal came from."""

    model: str
    """The model asked."""
    rationale: str
    """The model's explanation (the reply text outside its edit blocks)."""
    usage: LlmUsage
    """What this proposal cost."""
    repairs: int = 0
    """Repair rounds it needed."""


class ModelTrial(Model):
    """A model-written candidate that was tried and not kept, and what the model is told of it in
    its next rounds (written by `rollback` and `join`, read by the proposer's prompt and duplicate
    check)."""

    iteration: int
    """Loop iteration it was tried in."""
    candidate: str
    """Its id (`llm`, `llm-2`)."""
    verdict: str
    """The decision's verdict (`rejected`, `regression`, `inconclusive`, `failed`), or `accepted`
    for a candidate of a parallel round that passed on its host but lost to a faster one."""
    diff: str
    """The patch that was tried (unified diff)."""
    feedback: list[str] = Field(default_factory=list)
    """What the trial showed, one line each: the reason, speedup and CI, the mechanism check,
    where outputs diverged (prompt, position, expected vs got), a crash's log tail."""
    launch_argv: list[str] | None = None
    """For a launch-option candidate (then `diff` is empty): the launch command it ran with."""
    kept_instead: str | None = None
    """For a candidate accepted on its host and not kept because another candidate of its round was
    faster: that one's id (it was kept; this patch is not in the tree and may be sent again, to be
    tried on top of it)."""
