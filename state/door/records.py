"""What the session store keeps about each tool call (the recording that replay answers from)."""

from datetime import datetime
from typing import Any

from state.base import Model
from state.sessions.ids import SessionId


class ToolCallRecord(Model):
    """One call through the tool door: inputs, output or error, timing."""

    session_id: SessionId
    """Session that made the call."""
    seq: int
    """Position of the call in the session (0, 1, 2, ...)."""
    node: str
    """Graph node that made the call."""
    name: str
    """Registered tool name."""
    input: dict[str, Any]
    """Validated input model, as JSON-compatible data."""
    output: dict[str, Any] | None
    """Output model as JSON-compatible data; None when the call failed."""
    error: str | None
    """`ErrorType: one-line message` when the call failed."""
    started_at: datetime
    """When the call started."""
    duration_s: float
    """Wall time of the call."""
    reused_from: int | None = None
    """For a paid call made again after a crash: the seq of the superseded record answering it."""
    task_id: str | None = None
    """LangGraph's id of the parallel task (a `trial`) that made the call; None for the main
    sequence. On resume, the calls of a task whose writes the checkpoint holds stay current."""
