"""Steps before the first profile: prepare the repo, instrument, launch, measure the baseline."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, host_dir, step, transition
from state.calls import (BranchArgs, CopyTreeArgs, InstrumentArgs, LaunchArgs, MeasureArgs,
                         PushTreeArgs, RepoArgs, ServerArgs)
from state.loop import LoopState
from state.process import ServerHandle
from state.target import TargetConfig
from tools.repo import tree_fingerprint


def session_branch(session_id: str) -> str:
    """The branch accepted patches are committed on."""
    return f"perfloop/{session_id}"


@step("prepare")
def prepare(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["instrument", "launch", "abort"]]:
    """Create the demo checkout if asked, record the repo as found, switch to the session branch."""
    repo = state.target.repo
    if state.options.demo_source is not None:
        src = state.options.demo_source
        if state.target.host.kind == "ssh":  # the tree goes to the host first, then becomes a repo there
            src = host_dir(state) / "demo" / src.name
            call(runtime, "host.push_tree", PushTreeArgs(
                host=state.target.host, src=state.options.demo_source, dest=src))
        call(runtime, "repo.create_from_tree", CopyTreeArgs(src=src, dest=repo))
    start = state.start or call(runtime, "repo.snapshot", RepoArgs(repo=repo))
    branch = session_branch(state.session_id)
    call(runtime, "repo.ensure_branch", BranchArgs(repo=repo, name=branch))
    dirty = len(start.dirty_sha256)
    note = f"repo {repo} at {start.head_sha[:10]}, {dirty} uncommitted file(s) kept; branch {branch}"
    update = {"start": start, "branch": branch}
    if state.target.kind == "sglang":
        site = call(runtime, "repo.sglang_site", RepoArgs(repo=repo))
        hook = site.hook
        profile = state.target.profile.model_copy(update={
            "model_runner_path": hook.relpath, "hook_class": hook.class_name, "hook_method": hook.method})
        update |= {"sglang": site.layout, "target": state.target.model_copy(update={"profile": profile})}
        note += f"; sglang {site.layout.version}, decode hook {hook.class_name}.{hook.method}"
    nxt = "instrument" if state.target.profile.method == "patch" else "launch"
    return Command(update={**update, "transitions": transition("prepare", note)}, goto=nxt)


def instrument_if_needed(state: LoopState, runtime: Runtime[LoopContext]):
    """Insert the dormant profiler unless it is already in the tree; returns the record."""
    cfg = state.target.profile
    return state.instrumentation or call(runtime, "repo.instrument", InstrumentArgs(
        repo=state.target.repo, relpath=cfg.model_runner_path, class_name=cfg.hook_class,
        method=cfg.hook_method))


@step("instrument")
def instrument(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["launch", "abort"]]:
    """Put the dormant torch.profiler into ModelRunner.forward_decode before the first launch."""
    record = instrument_if_needed(state, runtime)
    return Command(update={"instrumentation": record, "transitions": transition(
        "instrument", f"dormant profiler inserted in {record.relpath}")}, goto="launch")


def start_server(state: LoopState, runtime: Runtime[LoopContext], instrumented: bool) -> ServerHandle:
    """Launch the server on the current tree (reusing a healthy one already running that tree)."""
    snap = call(runtime, "repo.snapshot", RepoArgs(repo=state.target.repo))
    fingerprint = tree_fingerprint(snap)
    if state.server is not None:
        if state.server.tree_sha256 == fingerprint and call(
                runtime, "server.status", ServerArgs(server=state.server)).healthy:
            return state.server
        call(runtime, "server.stop", ServerArgs(server=state.server,
                                                grace_s=state.target.launch.stop_grace_s))
    number = state.launches + 1
    files = host_dir(state)
    return call(runtime, "server.launch", LaunchArgs(
        repo=state.target.repo, launch=state.target.launch, python=state.options.python,
        log_path=files / "logs" / f"server-{number}.log", tree_sha256=fingerprint,
        instrumented=instrumented, profile_dir=files / "profiler" if instrumented else None,
        launch_number=number, pid_file=files / "server.pid"))


@step("launch")
def launch(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["baseline", "abort"]]:
    """Start the target server and wait for health."""
    server = start_server(state, runtime, instrumented=state.instrumentation is not None)
    note = f"server #{server.launch_number} healthy at {server.base_url} in {server.startup_s:.1f}s"
    return Command(update={"server": server, "launches": server.launch_number,
                           "transitions": transition("launch", note)}, goto="baseline")


def measure_server(state: LoopState, runtime: Runtime[LoopContext], label: str):
    """Run the measurement workload against the running server."""
    server, target = state.server, state.target
    return call(runtime, "bench.measure", MeasureArgs(
        base_url=server.base_url, model=target.model, config=target.measure, label=label,
        tree_sha256=server.tree_sha256, bench_serving=bench_serving_use(target),
        python=state.options.python, repo=str(target.repo))).measurement


def bench_serving_use(target: TargetConfig) -> Literal["auto", "always", "never"]:
    """The config's `measure.bench_serving.use`, where `auto` applies to SGLang targets only (pure)."""
    use = target.measure.bench_serving.use
    return "never" if use == "auto" and target.kind != "sglang" else use


@step("baseline")
def baseline(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["profile", "abort"]]:
    """Measure TTFT/TPOT and record the outputs every candidate must reproduce."""
    m = measure_server(state, runtime, "baseline")
    note = (f"baseline TPOT {m.tpot_ms.median:.1f} ms (IQR {m.tpot_ms.iqr:.1f}), "
            f"TTFT {m.ttft_ms.median:.1f} ms, measured by {m.client}")
    if not m.outputs_stable:
        note += "; WARNING: repeats of a prompt differ, outputs are not deterministic"
    return Command(update={"baseline": m, "reference": m,
                           "transitions": transition("baseline", note)}, goto="profile")


FORK_STEPS = ("profile", "diagnose", "propose", "approve")
"""Steps a session can be forked at: decision points before the tree changes in an iteration."""


@step("reconcile")
def reconcile(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal[
        "profile", "diagnose", "propose", "approve", "abort"]]:
    """First step of a fork: make the repo and server match the checkpoint, then continue there.

    The fork gets its own branch at the commit the parent had at that checkpoint; a profile step
    needs the (instrumented) server running, the other fork steps need nothing until relaunch.
    """
    head = state.accepted[-1].sha if state.accepted else state.start.head_sha
    branch = session_branch(state.session_id)
    call(runtime, "repo.ensure_branch", BranchArgs(repo=state.target.repo, name=branch, start_point=head))
    update: dict = {"branch": branch, "fork_at": None}
    if state.fork_at == "profile":
        if state.target.profile.method == "patch":
            update["instrumentation"] = instrument_if_needed(state, runtime)
            state = state.model_copy(update=update)
        server = start_server(state, runtime, instrumented=state.instrumentation is not None)
        update |= {"server": server, "launches": server.launch_number}
    note = f"forked: branch {branch} at {head[:10]}; continuing at {state.fork_at}"
    return Command(update={**update, "transitions": transition("reconcile", note)}, goto=state.fork_at)
