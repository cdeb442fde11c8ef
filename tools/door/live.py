"""The live door: runs a tool (here, or on the target's host through an executor) and records it.

The door validates the input type, runs the tool, validates the output, and records the call
(inputs, output or one-line error, start time, duration) through its recorder before returning or
re-raising. Recording every call from the first one is what later lets a session be replayed
without its host. With an executor (tools/hosts/client.py for an SSH host), host tools run there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel

from state.door.records import ToolCallRecord
from tools import interrupts
from tools.door.faults import fault_point
from tools.door.registry import In, Out, ToolSpec, spec_of
from tools.errors import one_line


class Recorder(Protocol):
    """Where tool calls are written as they happen."""

    def next_seq(self, session_id: str) -> int: ...

    def record(self, call: ToolCallRecord) -> None: ...


# A recorder may also offer `superseded_call(session_id, name, input) -> ToolCallRecord | None`
# (the session store does): then `reuse` tools are not called again after a crash; and
# `cut_launches(session_id) -> list[tuple[int, int]]`, the launch numbers attempts cut short used.


class Executor(Protocol):
    """Runs host tools on a remote host."""

    def call(self, spec: ToolSpec, args: BaseModel) -> BaseModel: ...


ExecutorFor = Callable[[Any], Executor | None]
"""Makes the executor for a host config (None: run here); used by `LiveDoor.branch`."""


class LiveDoor:
    """Runs tools for one session and records each call."""

    replaying = False
    """Answered from a recording (tools/door `Door.replaying`)."""

    def __init__(
        self,
        session_id: str,
        recorder: Recorder,
        executor: Executor | None = None,
        executors: ExecutorFor | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self.session_id = session_id
        self.recorder = recorder
        self.executor = executor
        self.executors = executors
        self.lock = lock or threading.Lock()
        self.node = "-"
        self.task_id: str | None = None
        self.floor: int | None = None

    def branch(self, node: str, host: Any = None, task_id: str | None = None) -> LiveDoor:
        """A door for one parallel branch: its own node label (`trial@HOST`), the executor of
        `host` (a host config; None: this door's), the same recording, numbered under one lock,
        each call recorded with `task_id` (which `SessionStore.supersede_after` keeps)."""
        executor = self.executor
        if host is not None:
            executor = self.executors(host) if self.executors is not None else None
        door = LiveDoor(self.session_id, self.recorder, executor, self.executors, self.lock)
        door.node, door.task_id = node, task_id
        return door

    def next_seq(self) -> int:
        """Sequence number the next recorded call will get."""
        return self.recorder.next_seq(self.session_id)

    def launch_floor(self) -> int:
        """The highest launch number an attempt cut short used (0: none); the calls a resume
        supersedes are all made before it runs, so it is read once."""
        if self.floor is None:
            cuts = getattr(self.recorder, "cut_launches", None)
            self.floor = max((n for _, n in cuts(self.session_id)), default=0) if cuts else 0
        return self.floor

    def call(self, fn: Callable[[In], Out], args: In) -> Out:
        """Run tool `fn` with `args`; record it; return its output or re-raise its error."""
        spec = spec_of(fn)
        if (signum := interrupts.stopping()) is not None:  # e.g. a parallel trial's thread
            raise interrupts.Interrupted(signum)
        if not isinstance(args, spec.input_type):
            raise TypeError(f"tool {spec.name!r} takes {spec.input_type.__name__}, got {type(args).__name__}")
        started, t0 = datetime.now(UTC), time.perf_counter()
        output: BaseModel | None = None
        error: str | None = None
        reused = self._reusable(spec, args)
        try:
            if reused is not None:
                output = spec.output_type.model_validate(reused.output)
                return output  # type: ignore[return-value]
            remote = self.executor is not None and spec.where == "host"
            result = self.executor.call(spec, args) if self.executor is not None and remote else fn(args)
            output = spec.output_type.model_validate(result.model_dump())
            fault_point(f"tool:{spec.name}")
            return output  # type: ignore[return-value]  # validated as the tool's own output type
        except Exception as exc:
            error = one_line(exc)
            raise
        finally:
            with self.lock:  # parallel branches share the sequence
                self.recorder.record(
                    ToolCallRecord(
                        session_id=self.session_id,
                        seq=self.recorder.next_seq(self.session_id),
                        node=self.node,
                        name=spec.name,
                        input=args.model_dump(mode="json"),
                        output=None if output is None else output.model_dump(mode="json"),
                        error=error,
                        started_at=started,
                        duration_s=time.perf_counter() - t0,
                        reused_from=None if reused is None else reused.seq,
                        task_id=self.task_id,
                    )
                )

    def _reusable(self, spec: ToolSpec, args: BaseModel) -> ToolCallRecord | None:
        """For a `reuse` tool: the killed attempt's successful record of this very call, if any."""
        find = getattr(self.recorder, "superseded_call", None)
        if not spec.reuse or find is None:
            return None
        return find(self.session_id, spec.name, args.model_dump(mode="json"))
