"""What every node gets besides the state: the tool door and run-time settings (never checkpointed)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from langgraph.runtime import Runtime
from langgraph.types import Command

from state.base import utcnow
from state.sessions.loop import LoopState, Transition
from state.sessions.updates import LoopUpdate
from tools import progress
from tools.door import Door
from tools.door.faults import fault_point
from tools.door.registry import In, Out
from tools.errors import ToolError, first_line

Node = Callable[[LoopState, "Runtime[LoopContext]"], Command]
T = TypeVar("T")
NO_DOOR = (
    "no door in the runtime context: the loop runs through perfloop's CLI (perfloop run|demo|resume), "
    "which passes LoopContext(door=...) per invocation; LangGraph Studio can show the graph, not run it"
)


@dataclass
class LoopContext:
    """Run-scoped context of one graph invocation."""

    door: Door
    """The door every side effect goes through (live, or answering from a recording)."""


def host_dir(state: LoopState) -> Path:
    """Where host-side files (server logs, pid file, profiler output) live on the target's host."""
    return state.options.host_dir or state.options.session_dir


def need(value: T | None, what: str) -> T:
    """`value`, which an earlier step set; the graph's wiring guarantees it at the steps that ask."""
    if value is None:
        raise RuntimeError(f"the loop state has no {what} at this step (wiring bug or damaged checkpoint)")
    return value


def transition(node: str, note: str) -> list[Transition]:
    """The one-item list a node adds to `transitions`."""
    return [Transition(node=node, at=utcnow(), note=note)]


def step(fn: Node | None = None, *, guarded: bool = True) -> Any:
    """Decorate a node (`@step` or `@step(guarded=False)`); its name is the function's name.

    At entry: a fault point, the door learns which node calls, and the launch count passes the
    numbers attempts cut short used (`past_cuts`). `calls_done` (the door's
    sequence number when the node finished) is checkpointed with the node's update, so on resume
    the calls of a killed attempt can be marked superseded. When `guarded`, an unexpected
    ToolError ends the loop through `abort`, which cleans up; errors a node expects (a patch that
    does not apply, a server that crashes after a patch) are handled inside the node.
    """

    def decorate(node_fn: Node) -> Node:
        node = node_fn.__name__

        @wraps(node_fn)
        def run(state: LoopState, runtime: Runtime[LoopContext]) -> Command:
            fault_point(f"node:{node}")
            progress.report(f"step {node}")
            door = door_of(runtime)
            door.node = node
            try:
                cmd = node_fn(past_cuts(state, door), runtime)
            except ToolError as exc:
                if not guarded:
                    raise
                message = first_line(exc)
                cmd = Command(
                    update=LoopUpdate(
                        error=f"{node}: {message}", transitions=transition(node, f"error: {message}")
                    ),
                    goto="abort",
                )
            update: LoopUpdate = {**(cmd.update or {}), "calls_done": door.next_seq()}
            return Command(update=update, goto=cmd.goto)

        return run

    return decorate(fn) if fn is not None else decorate


def past_cuts(state: LoopState, door: Door) -> LoopState:
    """`state` with its launch count past every number an attempt cut short used (`launch_floor`
    of the door), so the step's launches take numbers (logs, marks) no earlier launch had; as it
    is where `LoopOptions.launches_past_cuts` is off (recorded before it) or nothing was cut."""
    floor = getattr(door, "launch_floor", None)
    if not isinstance(state, LoopState) or not state.options.launches_past_cuts or floor is None:
        return state
    high = floor()
    return state.model_copy(update={"launches": high}) if high > state.launches else state


def door_of(runtime: Runtime[LoopContext]) -> Door:
    """The invocation's door; RuntimeError(NO_DOOR) when run without one (e.g. from LangGraph Studio)."""
    door = getattr(runtime.context, "door", None)
    if door is None or not callable(getattr(door, "call", None)):
        raise RuntimeError(NO_DOOR)
    return door


def call(runtime: Runtime[LoopContext], fn: Callable[[In], Out], args: In) -> Out:
    """Shorthand for `runtime.context.door.call(fn, args)`: run tool `fn` through the door."""
    return runtime.context.door.call(fn, args)
