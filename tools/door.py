"""The single door through which the loop causes side effects.

Every tool is a function `fn(args: InModel) -> OutModel` registered with `@tool("name")`. Nodes call
`door.call("name", InModel(...))`; the door validates the input, runs the tool, and records the call
(inputs, output or error, start time, duration) through its recorder before returning. Recording every
call from the first one is what later lets a session be replayed without its host.

A tool runs where the target lives (`where="host"`, the default) or always here (`where="local"`,
e.g. reading a fetched trace). With an executor (tools/remote_client.py for an SSH host), host tools
are run by it on the target host; without one, everything runs in this process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal, Protocol, TypeVar, get_type_hints

from pydantic import BaseModel

from state.records import ToolCallRecord
from tools.faults import fault_point

In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)


@dataclass(frozen=True)
class ToolSpec:
    """A registered tool: its name, function and typed input/output."""

    name: str
    fn: Callable[[BaseModel], BaseModel]
    input_type: type[BaseModel]
    output_type: type[BaseModel]
    where: Literal["host", "local"] = "host"


REGISTRY: dict[str, ToolSpec] = {}


def tool(name: str, where: Literal["host", "local"] = "host"
         ) -> Callable[[Callable[[In], Out]], Callable[[In], Out]]:
    """Register `fn` as tool `name`; its annotations give the input and output models; `where`
    says whether it runs on the target's host or always in this process."""

    def register(fn: Callable[[In], Out]) -> Callable[[In], Out]:
        hints = get_type_hints(fn)
        output_type = hints.pop("return")
        (input_type,) = hints.values()
        if name in REGISTRY and REGISTRY[name].fn is not fn:
            raise ValueError(f"tool {name!r} registered twice")
        REGISTRY[name] = ToolSpec(name, fn, input_type, output_type, where)
        return fn

    return register


class Recorder(Protocol):
    """Where tool calls are written as they happen."""

    def next_seq(self, session_id: str) -> int: ...

    def record(self, call: ToolCallRecord) -> None: ...


class Executor(Protocol):
    """Runs host tools on a remote host."""

    def call(self, name: str, args: BaseModel) -> BaseModel: ...


class Door:
    """Runs registered tools for one session and records each call."""

    def __init__(self, session_id: str, recorder: Recorder, executor: Executor | None = None) -> None:
        self.session_id = session_id
        self.recorder = recorder
        self.executor = executor
        self.node = "-"

    def next_seq(self) -> int:
        """Sequence number the next recorded call will get."""
        return self.recorder.next_seq(self.session_id)

    def call(self, name: str, args: BaseModel) -> BaseModel:
        """Run tool `name` with `args`; record it; return its output or re-raise its error."""
        spec = REGISTRY.get(name)
        if spec is None:
            raise KeyError(f"no tool named {name!r}; registered: {sorted(REGISTRY)}")
        if not isinstance(args, spec.input_type):
            raise TypeError(f"tool {name!r} takes {spec.input_type.__name__}, got {type(args).__name__}")
        started, t0 = datetime.now(timezone.utc), time.perf_counter()
        output: BaseModel | None = None
        error: str | None = None
        try:
            remote = self.executor is not None and spec.where == "host"
            result = self.executor.call(name, args) if remote else spec.fn(args)
            output = spec.output_type.model_validate(result.model_dump())
            fault_point(f"tool:{name}")
            return output
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            raise
        finally:
            self.recorder.record(
                ToolCallRecord(
                    session_id=self.session_id,
                    seq=self.recorder.next_seq(self.session_id),
                    node=self.node,
                    name=name,
                    input=args.model_dump(mode="json"),
                    output=None if output is None else output.model_dump(mode="json"),
                    error=error,
                    started_at=started,
                    duration_s=time.perf_counter() - t0,
                )
            )
