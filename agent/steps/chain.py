"""The step that measures a chain (`--proposer chain`): once the rounds are over with two or more
kept changes, the final tree and launch command are launched afresh and judged by the session's
rule against the baseline's tree and launch command, so the whole chain's speedup is measured
(with its interval), not multiplied from the links'.

The judgement is the rule's own (`Rule.judge`), on the state as it would be if the whole chain were
one candidate: the baseline measurement as the reference, the target's launch command as the kept
one and the final as the candidate's, and, when patches were kept, the commit the session started
from as the candidate's parent (interleaved and alternating arms launch the reference from a copy
of it). The output gate checks the final tree's correctness set against the baseline's outputs as
for any candidate.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, need, step, transition
from agent.decision.rules import rule_for
from agent.serving import start_server
from agent.steps.actions import instrument_if_needed
from state.door.calls import ServerArgs
from state.engines.workspace import CommitInfo
from state.sessions.chain import ChainCheck
from state.sessions.loop import LoopState, Proposal
from state.sessions.updates import LoopUpdate
from tools import server
from tools.errors import ServerError


def as_one_candidate(state: LoopState) -> LoopState:
    """The state as if the whole chain were one candidate against the baseline (pure)."""
    final_argv = state.kept_argv
    first = state.accepted[0] if state.accepted else None
    last = state.accepted[-1] if state.accepted else None
    whole = (
        CommitInfo(
            sha=last.sha, branch=last.branch, subject="the chain", trailers={}, parent_sha=first.parent_sha
        )
        if first is not None and last is not None
        else None
    )
    links = [d.source for d in state.decisions if d.verdict == "accepted"]
    proposal = Proposal(
        iteration=state.iteration,
        source="chain",
        title=f"the chain: {' -> '.join(links)}",
        explanation="Every kept change together, judged against the baseline.",
        diff="",
        files=[],
        expected_gain_share=0.0,
        expected_gain_ms=None,
        evidence=[],
        launch_argv=final_argv if final_argv != state.target.launch.argv else None,
    )
    return state.model_copy(
        update={
            "reference": need(state.baseline, "baseline"),
            "launch_argv": None,  # kept_argv: the target's, the baseline's launch command
            "pending_launch": final_argv if final_argv != state.target.launch.argv else None,
            "pending_commit": whole,
            "proposal": proposal,
            "iteration": state.options.max_iterations,  # no top-up for a next round
            "judgement": None,
        }
    )


@step
def chain(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Literal["finish", "abort"]]:
    """Launch the final tree and launch command afresh and judge them against the baseline."""
    at = as_one_candidate(state)
    if state.server is not None:  # a fresh launch of the final tree: a new draw of the launch noise
        call(runtime, server.stop, ServerArgs(server=state.server, grace_s=state.target.launch.stop_grace_s))
        at = at.model_copy(update={"server": None})
    update: LoopUpdate = {"server": None}
    if state.target.profile.method == "patch":
        update["instrumentation"] = instrument_if_needed(at, runtime)
        at = at.model_copy(update={"instrumentation": update["instrumentation"]})
    base = need(state.baseline, "baseline")
    before = {
        "launch_argv_before": state.target.launch.argv,
        "launch_argv_after": state.kept_argv,
        "commit_before": at.pending_commit.parent_sha if at.pending_commit else None,
        "tpot_ms_before": base.tpot_ms.median,
    }
    try:
        handle = start_server(at, runtime, instrumented=at.instrumentation is not None)
    except ServerError as exc:
        check = ChainCheck(
            **before, tpot_ms_after=None, judgement=None, problem=f"the final server failed: {exc}"
        )
        update |= {"launches": state.launches + 1, "chain_check": check}
        return Command(
            update=LoopUpdate(**update, transitions=transition("chain", check.line())), goto="finish"
        )
    at = at.model_copy(update={"server": handle, "launches": handle.launch_number})
    judged = rule_for(state.options.decision_rule).judge(at, runtime, "chain")
    check = ChainCheck(
        **before,
        tpot_ms_after=judged.measurement.tpot_ms.median,
        judgement=judged.judgement,
        problem=judged.problem,
    )
    launches = handle.launch_number + (judged.launches_beside or 0)
    server_now = handle if judged.server == "unchanged" else judged.server
    update |= {"server": server_now, "launches": launches, "chain_check": check}
    note = f"whole chain ({at.proposal.title if at.proposal else ''}): {check.line()}"
    return Command(update=LoopUpdate(**update, transitions=transition("chain", note)), goto="finish")
