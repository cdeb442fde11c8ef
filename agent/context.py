"""What every node gets besides the state: the tool door and run-time settings (never checkpointed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Command

from state.loop import LoopState, Transition
from tools.door import Door
from tools.errors import ToolError
from tools.faults import fault_point
from tools.store import utcnow


@dataclass
class LoopContext:
    """Run-scoped context of one graph invocation."""

    door: Door
    """The door every side effect goes through (live, or answering from a recording)."""


def host_dir(state: LoopState) -> Path:
    """Where host-side files (server logs, pid file, profiler output) live on the target's host."""
    return state.options.host_dir or state.options.session_dir


def transition(node: str, note: str) -> list[Transition]:
    """The one-item list a node adds to `transitions`."""
    return [Transition(node=node, at=utcnow(), note=note)]


def step(node: str, *, guarded: bool = True) -> Callable:
    """Decorate a node: fault point at entry, tell the door who calls, count the calls it made.

    `calls_done` (the door's sequence number when the node finished) is checkpointed with the node's
    update, so on resume the calls of a killed attempt can be marked superseded. When `guarded`, an
    unexpected ToolError ends the loop through `abort`, which cleans up; errors a node expects (a
    patch that does not apply, a server that crashes after a patch) are handled inside the node.
    """

    def decorate(fn: Callable[[LoopState, Runtime[LoopContext]], Command]) -> Callable:
        @wraps(fn)
        def run(state: LoopState, runtime: Runtime[LoopContext]) -> Command:
            fault_point(f"node:{node}")
            door = runtime.context.door
            door.node = node
            try:
                cmd = fn(state, runtime)
            except ToolError as exc:
                if not guarded:
                    raise
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                cmd = Command(update={"error": f"{node}: {message}",
                                      "transitions": transition(node, f"error: {message}")},
                              goto="abort")
            return Command(update={**(cmd.update or {}), "calls_done": door.next_seq()},
                           goto=cmd.goto)

        return run

    return decorate


def call(runtime: Runtime[LoopContext], name: str, args: Any) -> Any:
    """Shorthand for `runtime.context.door.call(name, args)`."""
    return runtime.context.door.call(name, args)
