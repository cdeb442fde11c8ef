"""Launching and measuring a target's server through the door: the one place `LaunchArgs` and
`MeasureArgs` are built (the loop's own server, a reference launched beside it, a trial host's).

Below `steps/` and `decision/`, which both start and measure servers; imports only
`agent.context`, `tools` and `state`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from langgraph.runtime import Runtime

from agent.context import LoopContext, call, host_dir
from state.config.target import MeasureConfig, TargetConfig
from state.door.calls import LaunchArgs, MeasureArgs, RepoArgs, ServerArgs
from state.engines.process import ServerHandle
from state.measurement.measure import Measurement
from state.measurement.workload import WorkloadConfig
from state.sessions.loop import LoopState
from tools import bench, server
from tools.engines.registry import engine
from tools.workspace import repo


def launch_args(
    target: TargetConfig,
    checkout: Path,
    argv: list[str],
    python: str,
    log_path: Path,
    tree_sha256: str,
    number: int,
    pid_file: Path,
    profile_dir: Path | None = None,
    env: dict[str, str] | None = None,
) -> LaunchArgs:
    """Launch `target` from `checkout` with `argv` (and `env` over its own) as launch `number`,
    instrumented when it gets a `profile_dir` (pure)."""
    more = {"env": {**target.launch.env, **env}} if env is not None else {}
    launch = target.launch.model_copy(update={"argv": argv, **more})
    return LaunchArgs(
        repo=checkout,
        launch=launch,
        python=python,
        log_path=log_path,
        tree_sha256=tree_sha256,
        instrumented=profile_dir is not None,
        profile_dir=profile_dir,
        launch_number=number,
        pid_file=pid_file,
    )


def bench_serving_use(target: TargetConfig) -> Literal["auto", "always", "never", "both"]:
    """The config's `measure.bench_serving.use`, where `auto` applies to engines whose benchmark runs
    by default (SGLang's) only."""
    use = target.measure.bench_serving.use
    return "never" if use == "auto" and not engine(target.kind).bench_by_default else use


def bench_engine(kind: str) -> str:
    """Whose serving benchmark a measurement may run: the engine's, where it has one; else
    `sglang`, as recorded before engines were registered (no benchmark runs for it then)."""
    return kind if engine(kind).bench() is not None else "sglang"


def measure_args(
    target: TargetConfig,
    handle: ServerHandle,
    label: str,
    python: str,
    checkout: Path,
    config: MeasureConfig | None = None,
    bench_serving: bool = True,
    workload: WorkloadConfig | None = None,
) -> MeasureArgs:
    """Measure the server `handle` with the target's workload (or `config`, and `workload` for its
    `[workload]`); with `bench_serving=False` never through sglang.bench_serving (one arm of an
    interleaved pair) (pure)."""
    return MeasureArgs(
        base_url=handle.base_url,
        model=target.model,
        config=config or target.measure,
        label=label,
        tree_sha256=handle.tree_sha256,
        bench_serving=bench_serving_use(target) if bench_serving else "never",
        engine=bench_engine(target.kind),
        python=python,
        repo=str(checkout),
        workload=workload or target.workload,
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
    args = launch_args(
        state.target,
        state.target.repo,
        argv,
        state.options.python,
        files / "logs" / f"server-{number}.log",
        fingerprint,
        number,
        files / "server.pid",
        profile_dir=files / "profiler" if instrumented else None,
    )
    return call(runtime, server.launch, args)


def measure_server(state: LoopState, runtime: Runtime[LoopContext], label: str) -> Measurement:
    """Run the measurement workload against the running server."""
    handle = state.server
    assert handle is not None, "measure_server needs a running server"
    args = measure_args(state.target, handle, label, state.options.python, state.target.repo)
    return call(runtime, bench.measure, args).measurement
