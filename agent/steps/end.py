"""Terminal steps: finish leaves a clean tree and no server; abort does the same after an error."""

from __future__ import annotations

from collections.abc import Callable

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, host_dir, step, transition
from agent.decision.arms.arms import arms_in_use
from agent.decision.arms.interleave import stop_reference
from agent.steps.actions import remove_instrumentation
from state.door.calls import CommitArgs, LeaveBranchArgs, PidFileArgs, ServerArgs
from state.sessions.loop import LoopState
from state.sessions.session import SessionStatus
from state.sessions.updates import LoopUpdate
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


GivenBack = tuple[str | None, str | None, str | None]
"""(the session branch left, None where deleted; where the checkout went back, None where it stays;
why it stays, None where it was given back)."""


def give_back(state: LoopState, runtime: Runtime[LoopContext], tool: Callable) -> GivenBack:
    """Switch the checkout back to the branch (or commit) it was found on; the session branch
    stays only if it holds accepted commits. A switch refused (the user's uncommitted edit in a
    file the commits change) leaves the checkout on the session branch, and says why."""
    if not state.branch or state.start is None:
        return state.branch, None, None
    back = LeaveBranchArgs(
        repo=state.target.repo, name=state.branch, back_to=state.start.branch, head_sha=state.start.head_sha
    )
    try:
        call(runtime, tool, back)
    except ToolError as exc:
        return state.branch, None, f"leave the session branch: {exc}"
    return (state.branch if state.accepted else None), state.start.branch or state.start.head_sha[:10], None


@step(guarded=False)
def finish(state: LoopState, runtime: Runtime[LoopContext]) -> Command:
    """Stop the server and take the instrumentation out: the repo keeps only accepted commits, on
    the session branch; the checkout goes back to the branch it was found on."""
    problems = _teardown(state, runtime)
    branch, back_on, why = state.branch, None, None
    if state.options.give_back_checkout:  # sessions recorded before end on their branch
        branch, back_on, why = give_back(state, runtime, repo.give_back)
    reason = state.stop_reason or "done"
    status: SessionStatus = "failed" if problems else "done"
    note = f"{status}: {reason}" + (f"; cleanup problems: {'; '.join(problems)}" if problems else "")
    note += f"; the checkout stays on {branch}: {why}" if why else ""  # e.g. the user's edit in the way
    return Command(
        update=LoopUpdate(
            branch=branch,
            checkout=back_on,
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

    The checkout is given back on the branch it was found on as finish does (sessions recorded
    before `give_back_checkout`: only when nothing was accepted)."""
    problems = _teardown(state, runtime)
    branch, back_on, why = state.branch, None, None
    if state.options.give_back_checkout:
        branch, back_on, why = give_back(state, runtime, repo.give_back)
    elif not state.accepted:  # sessions recorded before: given back only when nothing was accepted
        branch, _, why = give_back(state, runtime, repo.leave_branch)
    problems += [why] if why else []
    error = "; ".join([state.error or "aborted", *problems])
    return Command(
        update=LoopUpdate(
            branch=branch,
            checkout=back_on,
            server=None,
            instrumentation=None,
            pending_commit=None,
            status="failed",
            stop_reason=f"aborted: {error}",
            error=error,
            transitions=transition("abort", error),
        )
    )
