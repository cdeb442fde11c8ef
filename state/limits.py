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
