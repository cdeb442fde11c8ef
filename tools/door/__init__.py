"""The one door through which the loop causes side effects, and what it needs.

A node calls `door.call(server.launch, LaunchArgs(...))` and gets the tool's own output type back.
Two doors satisfy `Door`: `LiveDoor` (tools/door/live.py) runs the tool and records the call;
`ReplayDoor` (tools/door/replay.py) answers from a recording without touching any host. The session
store (store.py) holds recordings; faults.py holds the crash points the durability tests arm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from tools.door.registry import In, Out, ToolSpec, spec_of, tool

__all__ = ["Door", "ToolSpec", "spec_of", "tool"]


class Door(Protocol):
    """What a node sees: a typed call, the calling node's name, and the recording's position."""

    node: str
    """The node now calling (recorded with each call)."""
    replaying: bool
    """Whether calls are answered from a recording: only then may a node take a path kept for
    sessions recorded before a safeguard (a live session never does)."""

    def call(self, fn: Callable[[In], Out], args: In) -> Out:
        """Run (or play back) tool `fn` on `args`; its output, or its error re-raised."""
        ...

    def next_seq(self) -> int:
        """Sequence number the next recorded call will get."""
        ...

    def branch(self, node: str, host: Any = None, task_id: str | None = None) -> Door:
        """A door for one of several branches run at the same time (node label `NAME@BRANCH`),
        calling tools on `host` (a host config; None: where this door calls them); its calls are
        recorded with `task_id` (the LangGraph task running the branch)."""
        ...
