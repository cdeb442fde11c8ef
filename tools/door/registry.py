"""Declaring a tool: `@tool("name")` on `fn(args: InModel) -> OutModel`.

The decorator reads the input and output models from the annotations and attaches a `ToolSpec` to
the function itself, so the door finds everything it needs from the function a node passes it. The
name is how a call is recorded (and how a recording stays readable); it is never how a node calls.
The list of every tool lives in one place: `tools/toolbox.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_type_hints

from pydantic import BaseModel

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)

Where = Literal["host", "local"]
SPEC_ATTR = "__perfloop_tool__"


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its recorded name, function, typed input/output, and where it runs."""

    name: str
    fn: Callable[[Any], BaseModel]
    input_type: type[BaseModel]
    output_type: type[BaseModel]
    where: Where = "host"
    """`host`: where the target lives (an SSH host runs it there); `local`: always in this process."""
    reuse: bool = False
    """A paid, idempotent call (a model request): when a node re-runs after a crash, a call with the
    same input that the killed attempt recorded is answered from that record, not made again."""

    @property
    def location(self) -> str:
        """`module:function`, how an SSH host finds the tool in perfloop's shipped package."""
        return f"{self.fn.__module__}:{self.fn.__qualname__}"


def tool(
    name: str, where: Where = "host", reuse: bool = False
) -> Callable[[Callable[[In], Out]], Callable[[In], Out]]:
    """Declare `fn` as the tool `name`; its annotations give the input and output models."""

    def declare(fn: Callable[[In], Out]) -> Callable[[In], Out]:
        hints = get_type_hints(fn)
        output_type = hints.pop("return")
        (input_type,) = hints.values()
        setattr(fn, SPEC_ATTR, ToolSpec(name, fn, input_type, output_type, where, reuse))
        return fn

    return declare


def spec_of(fn: Callable[..., Any]) -> ToolSpec:
    """The spec `@tool` attached to `fn` (TypeError for a function that is not a tool)."""
    spec = getattr(fn, SPEC_ATTR, None)
    if not isinstance(spec, ToolSpec):
        raise TypeError(f"{getattr(fn, '__qualname__', fn)!r} is not a perfloop tool (no @tool)")
    return spec
