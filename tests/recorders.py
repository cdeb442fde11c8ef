"""A recorder for the tool door that keeps calls in memory (tests that need no session store)."""

from __future__ import annotations

from state.door.records import ToolCallRecord


class MemoryRecorder:
    """Implements tools.door.live.Recorder with a list."""

    def __init__(self) -> None:
        self.calls: list[ToolCallRecord] = []

    def next_seq(self, session_id: str) -> int:
        return len(self.calls)

    def record(self, call: ToolCallRecord) -> None:
        self.calls.append(call)
