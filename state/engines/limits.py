"""What a server says about how long a request may be."""

from state.base import Model


class ContextLimitArgs(Model):
    """Ask a running server for its context limit."""

    base_url: str
    """The server's base URL (no trailing slash)."""
    model: str
    """The served model id (an OpenAI `/v1/models` list may hold several)."""
    timeout_s: float = 5.0
    """Seconds to wait for each endpoint."""


class ContextLimit(Model):
    """A server's context limit, where it said one."""

    tokens: int | None
    """Largest prompt + generated tokens one request may hold; None when no endpoint said."""
    source: str
    """Which endpoint and field it came from (the smallest of those that answered), or why none."""


class FitArgs(Model):
    """Texts whose chat requests the server counts at given prompt lengths (its own tokenizer and
    chat template), fitted by requests generating one token each."""

    base_url: str
    """The server's base URL (no trailing slash)."""
    model: str
    """The served model id."""
    lengths: list[int]
    """Prompt tokens wanted, as the server counts them (chat template included), one per text."""
    seed: int
    """Seeds the words of the texts (the same session gives the same texts)."""
    timeout_s: float = 300.0
    """Per-request timeout."""


class FittedPrompts(Model):
    """Texts at the asked lengths, or as close below as the tokenizer allows."""

    prompts: list[str]
    """One text per asked length."""
    tokens: list[int]
    """The prompt tokens the server counted for each (at most the asked length)."""
    requests: int
    """Requests the fit sent (one generated token each)."""
    duration_s: float
    """Wall time of the fit."""


class LongPrompts(Model):
    """The correctness set's prompts stratified up to the context limit (agent/decision/gate/correctness.py)."""

    limit: int | None
    """The context limit they reach (prompt + generated tokens); None: unknown, no long prompts."""
    source: str
    """Where the limit came from: the target file, the server's endpoint and field, or why none."""
    stated_in_target: bool = False
    """Whether the target file states the limit (`[correctness] context_tokens`)."""
    prompts: list[str] = []
    """The texts, shortest first; the last ends `max_tokens` below the limit."""
    tokens: list[int] = []
    """Their prompt tokens as the server counts them."""
    fit: FittedPrompts | None = None
    """What fitting them to the server's tokenizer cost."""

    def line(self, max_tokens: int) -> str:
        """e.g. `3 long prompts of 41/139/216 + 40 tokens to the context limit 256
        (/get_server_info context_len), fitted in 5 requests, 0.3 s`, or why there are none."""
        if self.limit is None:
            return f"the context limit is unknown ({self.source}); no long prompts"
        lengths = "/".join(str(t) for t in self.tokens)
        cost = f", fitted in {self.fit.requests} requests, {self.fit.duration_s:.1f} s" if self.fit else ""
        return (
            f"{len(self.prompts)} long prompts of {lengths} + {max_tokens} tokens to the context "
            f"limit {self.limit} ({self.source}){cost}"
        )
