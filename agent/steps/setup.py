"""Steps before the first profile: prepare the repo, instrument, launch, measure the baseline."""

from __future__ import annotations

from typing import Literal, get_args

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, host_dir, need, step, transition
from agent.decision.arms.measuring import beside_note, serving_note
from agent.decision.rules import rule_for
from agent.serving import start_server
from agent.steps.actions import instrument_if_needed, session_branch
from state.config.target import TargetConfig
from state.door.calls import BranchArgs, CopyTreeArgs, PushTreeArgs, RepoArgs, ServerArgs
from state.engines.sglang import HookSite
from state.engines.vllm import EngineSiteArgs, VllmSiteArgs
from state.sessions.loop import ForkStep, LoopState
from state.sessions.updates import LoopUpdate
from tools import server
from tools.engines.registry import BUILTINS
from tools.errors import ServerLost, ToolError, first_line
from tools.hosts import transfer
from tools.workspace import repo


@step
def prepare(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["instrument", "launch", "abort"]]:
    """Create the demo checkout if asked, record the repo as found, switch to the session branch."""
    checkout = state.target.repo
    if state.options.demo_source is not None:
        src = state.options.demo_source
        if state.target.host.kind == "ssh":  # the tree goes to the host first, then becomes a repo there
            src = host_dir(state) / "demo" / src.name
            call(
                runtime,
                transfer.push_tree,
                PushTreeArgs(host=state.target.host, src=state.options.demo_source, dest=src),
            )
        call(runtime, repo.create_from_tree, CopyTreeArgs(src=src, dest=checkout))
    start = state.start or call(runtime, repo.snapshot, RepoArgs(repo=checkout))
    branch = session_branch(state.session_id)
    call(runtime, repo.ensure_branch, BranchArgs(repo=checkout, name=branch))
    dirty = len(start.dirty_sha256)
    note = f"repo {checkout} at {start.head_sha[:10]}, {dirty} uncommitted file(s) kept; branch {branch}"
    update: LoopUpdate = {"start": start, "branch": branch}
    if state.target.kind == "sglang":
        site = call(runtime, repo.sglang_site, RepoArgs(repo=checkout))
        hook = site.hook
        update |= {"sglang": site.layout, "target": hooked(state, hook)}
        note += f"; sglang {site.layout.version}, decode hook {hook.class_name}.{hook.method}"
    if state.target.kind == "vllm" and state.target.profile.method == "patch":
        env = state.target.launch.env
        hook = call(runtime, repo.vllm_site, VllmSiteArgs(repo=checkout, env=env))
        update["target"] = hooked(state, hook)
        note += f"; vllm step hook {hook.class_name}.{hook.method} in {hook.relpath}"
    if state.target.kind not in BUILTINS and state.target.profile.method == "patch":  # from outside
        args = EngineSiteArgs(repo=checkout, env=state.target.launch.env, kind=state.target.kind)
        if (found := call(runtime, repo.engine_site, args).hook) is not None:
            update["target"] = hooked(state, found)
            note += f"; {state.target.kind} step hook {found.class_name}.{found.method} in {found.relpath}"
    nxt: Literal["instrument", "launch"] = (
        "instrument" if state.target.profile.method == "patch" else "launch"
    )
    return Command(update=LoopUpdate(**update, transitions=transition("prepare", note)), goto=nxt)


def hooked(state: LoopState, hook: HookSite) -> TargetConfig:
    """The target with its profile pointed at `hook`, the method the dormant profiler wraps (pure)."""
    site = {"model_runner_path": hook.relpath, "hook_class": hook.class_name, "hook_method": hook.method}
    return state.target.model_copy(update={"profile": state.target.profile.model_copy(update=site)})


@step
def instrument(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["launch", "abort"]]:
    """Put the dormant torch.profiler into ModelRunner.forward_decode before the first launch."""
    record = instrument_if_needed(state, runtime)
    return Command(
        update=LoopUpdate(
            instrumentation=record,
            transitions=transition("instrument", f"dormant profiler inserted in {record.relpath}"),
        ),
        goto="launch",
    )


@step
def launch(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["baseline", "abort"]]:
    """Start the target server and wait for health."""
    handle = start_server(state, runtime, instrumented=state.instrumentation is not None)
    note = f"server #{handle.launch_number} healthy at {handle.base_url} in {handle.startup_s:.1f}s"
    return Command(
        update=LoopUpdate(
            server=handle, launches=handle.launch_number, transitions=transition("launch", note)
        ),
        goto="baseline",
    )


@step
def baseline(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["profile", "abort"]]:
    """Measure TTFT/TPOT and record the outputs every candidate must reproduce (by the session's
    rule). A measurement that failed because the server's process group is gone (killed from
    outside, or a crash of the unpatched tree) ends the session as interrupted (`ServerLost`), so
    `resume` launches it again; any other failure is the loop's `abort`."""
    try:
        measured = rule_for(state.options.decision_rule).baseline(state, runtime)
    except ToolError as exc:
        handle = need(state.server, "server")
        if call(runtime, server.status, ServerArgs(server=handle)).alive:
            raise
        raise ServerLost(
            f"server #{handle.launch_number} (pid {handle.process.pid}) stopped while the baseline was "
            f"measured ({first_line(exc)}): killed from outside (the OOM killer?), or it crashed "
            f"(its log: {handle.process.log_path})"
        ) from exc
    m = measured.measurement
    note = (
        (
            f"baseline TPOT {m.tpot_ms.median:.1f} ms (IQR {m.tpot_ms.iqr:.1f}), "
            f"TTFT {m.ttft_ms.median:.1f} ms, measured by {m.client}"
        )
        + serving_note(m)
        + beside_note(m)
        + measured.note
    )
    if not m.outputs_stable and (noise := measured.update.get("output_noise")) is not None:
        note += f"; repeats of a prompt differ here, planned for: {noise.line()}"
    elif not m.outputs_stable:
        note += "; WARNING: repeats of a prompt differ, outputs are not deterministic"
    update: LoopUpdate = {**measured.update, "baseline": m, "reference": m}
    update["transitions"] = transition("baseline", note)
    return Command(update=update, goto="profile")


FORK_STEPS: tuple[ForkStep, ...] = get_args(ForkStep)
"""Steps a session can be forked at: decision points before the tree changes in an iteration."""


@step
def reconcile(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["profile", "diagnose", "propose", "approve", "abort"]]:
    """First step of a fork: make the repo and server match the checkpoint, then continue there.

    The fork gets its own branch at the commit the parent had at that checkpoint; a profile step
    needs the (instrumented) server running, the other fork steps need nothing until relaunch.
    """
    fork_at: ForkStep = need(state.fork_at, "fork step")
    head = state.accepted[-1].sha if state.accepted else need(state.start, "start snapshot").head_sha
    branch = session_branch(state.session_id)
    call(runtime, repo.ensure_branch, BranchArgs(repo=state.target.repo, name=branch, start_point=head))
    update: LoopUpdate = {"branch": branch, "fork_at": None}
    if fork_at == "profile":
        if state.target.profile.method == "patch":
            update["instrumentation"] = instrument_if_needed(state, runtime)
            state = state.model_copy(update=update)
        handle = start_server(state, runtime, instrumented=state.instrumentation is not None)
        update |= {"server": handle, "launches": handle.launch_number}
    note = f"forked: branch {branch} at {head[:10]}; continuing at {fork_at}"
    return Command(update=LoopUpdate(**update, transitions=transition("reconcile", note)), goto=fork_at)
