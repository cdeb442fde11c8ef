"""A door for unit tests of the A/A launches: servers, measurements and the memory fit answered from
a script (no process is started), the A/A store (`aa.record`) run for real on $PERFLOOP_HOME."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from langgraph.runtime import Runtime

from agent.cli.target import load_target
from agent.context import LoopContext
from state.config.options import LoopOptions
from state.door.calls import LaunchArgs, MeasureArgs, MeasureResult, ServerStatus
from state.engines.process import ProcessHandle, ServerHandle
from state.engines.workspace import WorkspaceSnapshot
from state.measurement.arms import MemoryFit
from state.measurement.decision import DecisionConfig
from state.measurement.measure import Measurement, RequestRecord
from state.sessions.loop import LoopState
from tests.unit.test_target import DEMO_TOML
from tools.client.stats import summarize
from tools.door import Door, spec_of
from tools.door.registry import In, Out


def measurement(label: str, tpot_ms: float, prompts: int = 2, reps: int = 3) -> Measurement:
    """`reps` requests of each prompt at `tpot_ms`, outputs `out-<prompt>`."""
    records = [
        RequestRecord(prompt_index=i, ttft_ms=5.0, itl_ms=[tpot_ms] * 3, text=f"out-{i}", completion_tokens=4)
        for _ in range(reps)
        for i in range(prompts)
    ]
    return summarize(label, "tree", records, prompts, wall_s=1.0)


def handle(number: int) -> ServerHandle:
    """A server handle of launch `number` (no process behind it)."""
    process = ProcessHandle(
        pid=90000 + number, pgid=90000 + number, log_path=Path("/dev/null"), started_at=datetime(2026, 1, 1)
    )
    return ServerHandle(
        process=process, base_url="http://127.0.0.1:1", port=1, tree_sha256="t",
        instrumented=False, launch_number=number, startup_s=0.1,
    )  # fmt: skip


class ScriptedDoor:
    """Answers `server.*`, `repo.snapshot`, `bench.measure` and `host.memory_fit` from a script:
    launch n measures `tpot_ms[n]`; `free_bytes` is the host's free memory beside a 1 GiB server."""

    replaying = False

    def __init__(self, tpot_ms: dict[int, float], free_bytes: int = 1 << 32, fit_error: bool = False) -> None:
        self.node = "baseline"
        self.tpot_ms, self.free_bytes, self.fit_error = tpot_ms, free_bytes, fit_error
        self.calls: list[tuple[str, Any]] = []
        self.running: set[int] = set()

    def next_seq(self) -> int:
        return len(self.calls)

    def branch(self, node: str, host: Any = None, task_id: str | None = None) -> Door:
        raise NotImplementedError

    def call(self, fn: Callable[[In], Out], args: In) -> Out:
        name = spec_of(fn).name
        self.calls.append((name, args))
        return cast(Out, self.answer(name, args, fn))

    def answer(self, name: str, args: Any, fn: Callable[[Any], Any]) -> Any:
        if name == "aa.record":
            return fn(args)
        if name == "repo.snapshot":
            return WorkspaceSnapshot(
                path=str(args.repo), head_sha="a" * 40, branch="main", dirty_sha256={},
                staged_diff_sha256="", unstaged_diff_sha256="", head_tree_sha="tree-1",
            )  # fmt: skip
        if name == "server.launch":
            assert isinstance(args, LaunchArgs) and not self.running, "one server at a time"
            self.running.add(args.launch_number)
            return handle(args.launch_number)
        if name == "server.stop":
            self.running.discard(args.server.launch_number)
            return ServerStatus(alive=False, healthy=False)
        if name == "server.status":
            return ServerStatus(alive=True, healthy=args.server.launch_number in self.running)
        if name == "bench.measure":
            assert isinstance(args, MeasureArgs) and len(self.running) == 1
            (number,) = self.running
            return MeasureResult(measurement=measurement(args.label, self.tpot_ms[number]))
        if name == "host.memory_fit":
            if self.fit_error:
                raise RuntimeError("nvidia-smi failed")
            return MemoryFit(
                device="cpu", server_bytes=1 << 30, free_bytes=self.free_bytes, where="host memory"
            )
        raise AssertionError(f"unscripted tool {name}")

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]


def session(tmp_path: Path, session_id: str = "s1", aa_evidence: bool = True, **decide: Any) -> LoopState:
    """The demo target (its `[decide]` with `decide`) in a new session's state, nothing launched."""
    target = load_target(DEMO_TOML)
    cfg = DecisionConfig.model_validate({**target.decide.model_dump(), **decide})
    opts = LoopOptions(
        session_dir=tmp_path / session_id, python="python3", decision_rule="ci-v1", power=True,
        aa_evidence=aa_evidence,
    )  # fmt: skip
    return LoopState(session_id=session_id, target=target.model_copy(update={"decide": cfg}), options=opts)


def runtime_of(door: ScriptedDoor) -> Runtime[LoopContext]:
    return Runtime(context=LoopContext(door=door))
