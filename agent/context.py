"""What every node gets besides the state: the tool door and run-time settings (never checkpointed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Command

from state.loop import LoopState, Transition
from tools.door import Door
from tools.errors import ToolError
from tools.store import utcnow


@dataclass
class LoopContext:
    """Run-scoped context of one graph invocation."""

    door: Door
    """The door every side effect goes through."""
    python: str
    """Interpreter substituted for `{python}` in launch commands."""


def transition(node: str, note: str) -> list[Transition]:
    """The one-item list a node adds to `transitions`."""
    return [Transition(node=node, at=utcnow(), note=note)]


def step(node: str) -> Callable:
    """Decorate a node: tell the door which node calls, and send any ToolError to `abort`.

    Errors a node expects (a patch that does not apply, a server that crashes after a patch) are
    handled inside the node; anything else a tool raises ends the loop through `abort`, which cleans up.
    """

    def decorate(fn: Callable[[LoopState, Runtime[LoopContext]], Command]) -> Callable:
        @wraps(fn)
        def run(state: LoopState, runtime: Runtime[LoopContext]) -> Command:
            runtime.context.door.node = node
            try:
                return fn(state, runtime)
            except ToolError as exc:
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                return Command(update={"error": f"{node}: {message}",
                                       "transitions": transition(node, f"error: {message}")},
                               goto="abort")

        return run

    return decorate


def call(runtime: Runtime[LoopContext], name: str, args: Any) -> Any:
    """Shorthand for `runtime.context.door.call(name, args)`."""
    return runtime.context.door.call(name, args)
