"""Actions several steps share: the session branch, instrumenting, (re)starting and measuring the server.

Each is a plain function of the state and runtime that calls tools through the door; steps import
them from here and never from each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, host_dir
from playbooks.engine import load_playbooks
from playbooks.schema import Playbook
from state.calls import (
    InstrumentArgs,
    LaunchArgs,
    MeasureArgs,
    RemoveInstrumentationArgs,
    RepoArgs,
    ServerArgs,
)
from state.loop import LoopState
from state.measure import Measurement
from state.process import ServerHandle
from state.target import TargetConfig
from state.workspace import InstrumentationRecord
from tools import bench, server
from tools.workspace import repo
from tools.workspace.commands import SESSION_BRANCH_PREFIX


def session_branch(session_id: str) -> str:
    """The branch accepted patches are committed on (pure)."""
    return f"{SESSION_BRANCH_PREFIX}{session_id}"


def instrument_if_needed(state: LoopState, runtime: Runtime[LoopContext]) -> InstrumentationRecord:
    """Insert the dormant profiler unless it is already in the tree; returns the record."""
    cfg = state.target.profile
    return state.instrumentation or call(
        runtime,
        repo.instrument,
        InstrumentArgs(
            repo=state.target.repo,
            relpath=cfg.model_runner_path,
            class_name=cfg.hook_class,
            method=cfg.hook_method,
        ),
    )


def remove_instrumentation(state: LoopState, runtime: Runtime[LoopContext]) -> None:
    """Reverse exactly the instrumentation hunks, if any are in the tree."""
    if state.instrumentation is not None:
        call(
            runtime,
            repo.remove_instrumentation,
            RemoveInstrumentationArgs(repo=state.target.repo, record=state.instrumentation),
        )


def start_server(state: LoopState, runtime: Runtime[LoopContext], instrumented: bool) -> ServerHandle:
    """Launch the server on the current tree with the session's launch command (the candidate's
    while a launch-option fix is measured), reusing a healthy one already running both."""
    snap = call(runtime, repo.snapshot, RepoArgs(repo=state.target.repo))
    fingerprint = repo.tree_fingerprint(snap)
    argv = state.argv
    if state.server is not None:
        if (
            state.server.tree_sha256 == fingerprint
            and state.server.launch_argv in ([], argv)  # [] = recorded before it was kept
            and call(runtime, server.status, ServerArgs(server=state.server)).healthy
        ):
            return state.server
        call(runtime, server.stop, ServerArgs(server=state.server, grace_s=state.target.launch.stop_grace_s))
    number = state.launches + 1
    files = host_dir(state)
    return call(
        runtime,
        server.launch,
        LaunchArgs(
            repo=state.target.repo,
            launch=state.target.launch.model_copy(update={"argv": argv}),
            python=state.options.python,
            log_path=files / "logs" / f"server-{number}.log",
            tree_sha256=fingerprint,
            instrumented=instrumented,
            profile_dir=files / "profiler" if instrumented else None,
            launch_number=number,
            pid_file=files / "server.pid",
        ),
    )


def bench_serving_use(target: TargetConfig) -> Literal["auto", "always", "never"]:
    """The config's `measure.bench_serving.use`, where `auto` applies to SGLang targets only (pure)."""
    use = target.measure.bench_serving.use
    return "never" if use == "auto" and target.kind != "sglang" else use


def measure_server(state: LoopState, runtime: Runtime[LoopContext], label: str) -> Measurement:
    """Run the measurement workload against the running server."""
    handle, target = state.server, state.target
    assert handle is not None, "measure_server needs a running server"
    return call(
        runtime,
        bench.measure,
        MeasureArgs(
            base_url=handle.base_url,
            model=target.model,
            config=target.measure,
            label=label,
            tree_sha256=handle.tree_sha256,
            bench_serving=bench_serving_use(target),
            python=state.options.python,
            repo=str(target.repo),
        ),
    ).measurement


def playbooks_of(state: LoopState) -> list[Playbook]:
    """The playbooks this session searches: the built-in catalog (unless turned off) and --playbooks dirs."""
    books = load_playbooks(state.options.playbook_dirs)
    if state.options.builtin_playbooks:
        return books
    extra = {d.resolve() for d in state.options.playbook_dirs}
    return [b for b in books if Path(b.source_dir).resolve().parent in extra]
