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
