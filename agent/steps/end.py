"""Terminal steps: finish leaves a clean tree and no server; abort does the same after an error."""

from __future__ import annotations

from collections.abc import Callable

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, host_dir, step, transition
from agent.decision.arms.arms import arms_in_use
from agent.decision.arms.interleave import stop_reference
from agent.steps.actions import remove_instrumentation
from state.calls import CommitArgs, LeaveBranchArgs, PidFileArgs, ServerArgs
from state.loop import LoopState
from state.session import SessionStatus
from state.updates import LoopUpdate
from tools import server
from tools.errors import ToolError
from tools.workspace import repo


def _teardown(state: LoopState, runtime: Runtime[LoopContext]) -> list[str]:
    """Stop the server, revert an undecided commit, remove instrumentation; return what failed."""
    problems: list[str] = []
    steps: list[tuple[str, Callable[[], object]]] = []
    if state.server is not None:
        steps.append(
            (
                "stop server",
                lambda: call(
                    runtime,
                    server.stop,
                    ServerArgs(server=state.server, grace_s=state.target.launch.stop_grace_s),
                ),
            )
        )
    steps.append(
        (
            "stop orphaned server",
            lambda: call(
                runtime,
                server.stop_recorded,
                PidFileArgs(
                    pid_file=host_dir(state) / "server.pid",
                    repo=state.target.repo,
                    grace_s=state.target.launch.stop_grace_s,
                ),
            ),
        )
    )
    if arms_in_use(state) != "sequential":
        steps.append(("stop the reference server", lambda: stop_reference(state, runtime)))
    if state.pending_commit is not None:
        steps.append(
            (
                "revert undecided commit",
                lambda: call(
                    runtime,
                    repo.revert_commit,
                    CommitArgs(repo=state.target.repo, commit=state.pending_commit),
                ),
            )
        )
    steps.append(("remove instrumentation", lambda: remove_instrumentation(state, runtime)))
    for what, action in steps:
        try:
            action()
        except ToolError as exc:
            problems.append(f"{what}: {exc}")
    return problems


@step(guarded=False)
def finish(state: LoopState, runtime: Runtime[LoopContext]) -> Command:
    """Stop the server and take the instrumentation out: the repo keeps only accepted commits."""
    problems = _teardown(state, runtime)
    reason = state.stop_reason or "done"
    status: SessionStatus = "failed" if problems else "done"
    note = f"{status}: {reason}" + (f"; cleanup problems: {'; '.join(problems)}" if problems else "")
    return Command(
        update=LoopUpdate(
            server=None,
            instrumentation=None,
            pending_commit=None,
            status=status,
            stop_reason=reason,
            error="; ".join(problems) or None,
            transitions=transition("finish", note),
        )
    )


@step(guarded=False)
def abort(state: LoopState, runtime: Runtime[LoopContext]) -> Command:
    """After an unexpected tool error: clean up as finish does, and mark the session failed.

    When nothing was accepted (e.g. a set-up failure at the first launch), the repo is also given
    back on the branch it was found on, and the empty session branch deleted."""
    problems = _teardown(state, runtime)
    branch = state.branch
    if branch and not state.accepted and state.start is not None:
        try:
            call(
                runtime,
                repo.leave_branch,
                LeaveBranchArgs(
                    repo=state.target.repo,
                    name=branch,
                    back_to=state.start.branch,
                    head_sha=state.start.head_sha,
                ),
            )
            branch = None
        except ToolError as exc:
            problems.append(f"leave the session branch: {exc}")
    error = "; ".join([state.error or "aborted", *problems])
    return Command(
        update=LoopUpdate(
            branch=branch,
            server=None,
            instrumentation=None,
            pending_commit=None,
            status="failed",
            stop_reason=f"aborted: {error}",
            error=error,
            transitions=transition("abort", error),
        )
    )
