"""Errors raised by tools. Each carries one line a user can act on: what was wrong, what to do."""


class ToolError(Exception):
    """Base of every error a tool raises on purpose. str(err) is a single actionable line."""


class PatchError(ToolError):
    """A patch does not apply, or applied but could not be committed or reverted."""


class InstrumentationError(ToolError):
    """Instrumentation could not be inserted or removed exactly."""


class ServerError(ToolError):
    """A target server failed to start, crashed, hung or could not be stopped."""


class TraceError(ToolError):
    """A profiler trace or summary table is missing, truncated or malformed."""


class ConfigError(ToolError):
    """A target config or command-line value is invalid."""


class NotReplayable(ConfigError):
    """A session that is there but cannot be shown: an import whose recording does not replay here."""


class LlmError(ToolError):
    """A model endpoint could not be reached, refused the request, or answered unusably."""


class StoreUnreachable(Exception):
    """The PostgreSQL session store's connection dropped and could not be opened again in time
    (tools/store/db.py). Not a ToolError: a step must not take it for its tool's failure (the
    loop's `abort`); the session ends as interrupted, resumable once the store is back."""


class ServerLost(Exception):
    """The session's own server (the baseline's tree, no patch under test) vanished while a step
    used it: its process group is gone (killed from outside: the OOM killer, a user's `kill`). Not
    a ToolError, so no step takes it for the loop's `abort`: the session ends as interrupted, and
    `resume` finds the server gone and launches it again (agent/sessions/revive.py). A candidate's
    server that dies stays a rejection: it cannot be told from a patch that broke it."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, as the door records errors."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def error_from(text: str) -> Exception:
    """The exception a one-line `Type: message` names (a recorded or remote error): the same
    `tools.errors` class when it is one, or the same imported ToolError subclass, else a ToolError
    carrying the whole line."""
    name, _, message = text.partition(": ")
    cls = globals().get(name)
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls(message)
    sub = _tool_error_named(name)  # e.g. an SSHError (tools/hosts), so a replay classifies it alike
    if sub is not None:
        try:
            return sub(message)
        except TypeError:  # a constructor that wants more than the message
            pass
    return ToolError(text)


def _tool_error_named(name: str) -> type[ToolError] | None:
    """The ToolError subclass (any module, once imported) named `name`."""
    todo: list[type[ToolError]] = [ToolError]
    while todo:
        cls = todo.pop()
        if cls.__name__ == name:
            return cls
        todo += cls.__subclasses__()
    return None
