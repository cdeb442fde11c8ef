"""Steps that change the target: approve, apply, clean up instrumentation, relaunch, roll back."""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, interrupt

from agent.context import LoopContext, call, need, step, transition
from agent.decision.gate.correctness import refusal
from agent.decision.rules import rule_for
from agent.proposer.briefing.feedback import model_trial
from agent.proposer.chat.asking import needs_human
from agent.serving import start_server
from agent.steps.actions import instrument_if_needed, remove_instrumentation
from agent.steps.approval import approval_request, batch_request
from agent.steps.fanout import fan_out
from playbooks import launch
from state.door.calls import ApplyArgs, CommitArgs
from state.engines.workspace import PatchPolicy
from state.sessions.fanout import BatchApproval
from state.sessions.loop import Approval, Decision, LoopState
from state.sessions.updates import LoopUpdate
from tools.errors import PatchError, ServerError
from tools.sglang.patches import does_not_fit
from tools.workspace import repo


def approve_batch(state: LoopState) -> Command:
    """One answer for a batch of parallel candidates before any is tried: all of them, the ones it
    names (`playbooks`), or none; the others become rejected decisions.

    With `--approve manual`, `propose` goes to `approve` with the batch in `LoopState.candidates`
    and no `proposal`, and `approve` hands it here. It pauses once (`batch_request`, agent/steps/approval.py: the first candidate's view
    with the batch's title, files and diffs, so every renderer of an approval works, plus each
    candidate's view under `candidates`), and the answer (`state/fanout.BatchApproval`, an
    `Approval` with `playbooks`: the ones to try, None for all; `perfloop approve --only ID`; the
    state keeps the plain `Approval`) fans out the chosen ones (`fan_out`, the `Send`s `propose`
    makes) and records the others as rejected; a rejection of the batch goes back to `propose`. The
    batch's answer covers applying the best verified one (join's auto `Approval`).
    `agent/sessions/approving.batch_refusal` refuses, before anything is recorded, an edited patch
    for a batch, `--only` names outside it, and `--only` for a single proposal (the CLI and the
    approval page share it; the page turns its ticked candidates into `--only`,
    `agent/web/answers.only_args`)."""
    answer = BatchApproval.model_validate(interrupt(batch_request(state)))
    named = set(answer.playbooks or [p.source for p in state.candidates]) if answer.approved else set()
    chosen = [p for p in state.candidates if p.source in named]
    why = answer.reason or ("rejected" if not answer.approved else "not chosen for trial")
    decisions = [
        Decision(
            iteration=state.iteration,
            source=p.source,
            verdict="rejected",
            reason=f"rejected by {answer.by}: {why}",
        )
        for p in state.candidates
        if p not in chosen
    ]
    what = f"approved for trial ({answer.by}): {', '.join(p.source for p in chosen) or 'none'}"
    approval = Approval.model_validate(answer.model_dump(exclude={"playbooks"}))
    update: LoopUpdate = {
        "approval": approval,
        "decisions": decisions,
        "transitions": transition("approve", what),
    }
    if not chosen:
        return Command(update=update | {"candidates": []}, goto="propose")
    sends, fanned = fan_out(state, chosen)
    return Command(update=update | fanned, goto=sends)


@step
def approve(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["cleanup", "propose", "trial", "abort"]]:
    """Auto-approve, or pause (LangGraph interrupt) until `perfloop approve|reject` answers; a batch
    of parallel candidates gets one answer for all before any is tried (`approve_batch`)."""
    if state.proposal is None and state.candidates:
        return approve_batch(state)
    auto = state.options.approve == "auto" and refusal(state) is None
    if auto and not needs_human(state, [need(state.proposal, "proposal")]):
        answer = Approval(approved=True, by="auto")
    else:
        answer = Approval.model_validate(interrupt(approval_request(state)))
    p = need(state.proposal, "proposal")
    if answer.approved:
        what = (
            f"a human-edited patch replacing {p.source} approved ({answer.by})"
            if answer.diff is not None
            else f"{p.source} approved ({answer.by})"
        )
        return Command(
            update=LoopUpdate(approval=answer, transitions=transition("approve", what)),
            goto="cleanup",
        )
    reason = answer.reason or "rejected"
    decision = Decision(
        iteration=state.iteration,
        source=p.source,
        verdict="rejected",
        reason=f"rejected by {answer.by}: {reason}",
    )
    return Command(
        update=LoopUpdate(
            approval=answer,
            decisions=[decision],
            proposal=None,
            transitions=transition("approve", decision.reason),
        ),
        goto="propose",
    )


def commit_identity(state: LoopState) -> tuple[str, dict[str, str]]:
    """Subject and trailers of the candidate's commit (pure). A human-edited patch is its own
    proposal: its own subject, `Perfloop-Edited`, and the playbook only as what it replaces."""
    p = need(state.proposal, "proposal")
    trailers = {"Perfloop-Session": state.session_id}
    if state.edited:
        by = state.approval.by if state.approval is not None else "human"
        subject = f"perfloop: human-edited patch (iteration {state.iteration})"
        trailers |= {"Perfloop-Edited": by, "Perfloop-Replaces": p.source}
    else:
        subject = f"perfloop: {p.title}"
        trailers["Perfloop-Playbook"] = p.source
    if p.origin is not None:
        trailers["Perfloop-Proposer"] = f"llm {p.origin.model}"
    return subject, {**trailers, "Perfloop-Iteration": str(state.iteration)}


@step
def apply(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["relaunch", "propose", "abort"]]:
    """Apply the patch fully or not at all, committed alone on the session branch; a launch-option
    fix becomes the candidate's launch command instead (kept in the session, no commit)."""
    p = need(state.proposal, "proposal")
    if p.launch_argv is not None:
        note = f"launch options for the candidate: {launch.describe(state.argv, p.launch_argv)}"
        if state.edited:
            note += " (the edited patch is ignored: this fix changes launch options, not code)"
        return Command(
            update=LoopUpdate(pending_launch=p.launch_argv, transitions=transition("apply", note)),
            goto="relaunch",
        )
    subject, trailers = commit_identity(state)
    edited_diff = state.approval.diff if state.edited and state.approval is not None else None
    diff = edited_diff if edited_diff is not None else p.diff
    policy = PatchPolicy(max_bytes=state.target.max_patch_bytes, allow_binary=p.binary and not state.edited)
    try:
        commit = call(
            runtime,
            repo.apply_patch,
            ApplyArgs(repo=state.target.repo, diff=diff, subject=subject, trailers=trailers, policy=policy),
        )
    except PatchError as exc:
        if str(exc).startswith("patch refused"):  # by the patch gate: unsafe or malformed
            reason = str(exc)
        elif state.sglang is not None:
            reason = str(does_not_fit(state.sglang.version, diff, exc))
        elif str(exc).startswith("patch does not apply"):  # git's reason already says so
            reason = str(exc)
        else:
            reason = f"patch does not apply: {exc}"
        decision = Decision(
            iteration=state.iteration,
            source=p.source,
            verdict="failed",
            reason=reason,
            edited=state.edited,
        )
        return Command(
            update=LoopUpdate(
                decisions=[decision], proposal=None, transitions=transition("apply", decision.reason)
            ),
            goto="propose",
        )
    note = f"committed {commit.sha[:10]} on {commit.branch}"
    return Command(
        update=LoopUpdate(pending_commit=commit, transitions=transition("apply", note)), goto="relaunch"
    )


@step
def cleanup(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["apply", "abort"]]:
    """Remove the profiler instrumentation before the patch goes in.

    The tree is then HEAD plus the user's own changes, so a patch near forward_decode applies as it
    would to the user's checkout, and the commit can never pick up instrumentation.
    """
    remove_instrumentation(state, runtime)
    note = (
        "instrumentation removed, file hash verified"
        if state.instrumentation
        else "no instrumentation in the tree"
    )
    return Command(
        update=LoopUpdate(instrumentation=None, transitions=transition("cleanup", note)), goto="apply"
    )


@step
def relaunch(
    state: LoopState, runtime: Runtime[LoopContext]
) -> Command[Literal["measure", "rollback", "abort"]]:
    """Restart the server on the patched tree; a crash or hang rolls the patch back.

    With patch profiling the dormant instrumentation is put back first: the reference ran with it,
    so the candidate is measured alike, and a next profile needs no extra launch. (Sessions on the
    old IQR rule put it back only when another iteration may follow, as they were recorded.)
    """
    update: LoopUpdate = {}
    if (
        rule_for(state.options.decision_rule).instruments_candidate(state)
        and state.target.profile.method == "patch"
    ):
        update["instrumentation"] = instrument_if_needed(state, runtime)
        state = state.model_copy(update=update)
    try:
        handle = start_server(state, runtime, instrumented=state.instrumentation is not None)
    except ServerError as exc:
        p = need(state.proposal, "proposal")
        decision = Decision(
            iteration=state.iteration,
            source=p.source,
            verdict="failed",
            reason=f"server failed after the patch: {exc}",
            edited=state.edited,
            launch_argv=p.launch_argv,  # a search trial's config, so that it is not tried again
        )
        return Command(
            update=LoopUpdate(
                **update,
                server=None,
                launches=state.launches + 1,
                decisions=[decision],
                transitions=transition("relaunch", decision.reason),
            ),
            goto="rollback",
        )
    note = f"server #{handle.launch_number} healthy in {handle.startup_s:.1f}s"
    return Command(
        update=LoopUpdate(
            **update, server=handle, launches=handle.launch_number, transitions=transition("relaunch", note)
        ),
        goto="measure",
    )


@step
def rollback(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["propose", "abort"]]:
    """Undo the candidate's commit or launch options; the reference measurement again describes
    the tree and the launch command (the next launch uses the session's own)."""
    commit = state.pending_commit
    if commit is not None:
        call(runtime, repo.revert_commit, CommitArgs(repo=state.target.repo, commit=commit))
    p = need(state.proposal, "proposal")
    note = f"rolled back {p.source}" + (f" ({commit.sha[:10]})" if commit else "")
    if state.pending_launch is not None:
        note += f"; launch options back to {' '.join(state.kept_argv)}"
    return Command(
        update=LoopUpdate(
            pending_launch=None,
            pending_commit=None,
            proposal=None,
            candidate_measurement=None,
            model_trials=model_trial(state, runtime),
            transitions=transition("rollback", note),
        ),
        goto="propose",
    )
