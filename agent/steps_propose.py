"""The propose step: a playbook's stored patch when one fits, else (or always) a model-written one.

`--proposer playbook` never calls a model; `llm` never uses a stored patch (playbooks still
diagnose); `auto` tries the playbooks first. A model's conversation (agent/proposer/) runs inside
this node as recorded door calls; a conversation that ends without a valid patch is recorded as a
failed `llm` decision with its reason, and the step runs again to try once more (up to
`max_proposals` per iteration) or to stop with that reason.
"""

from __future__ import annotations

import re
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.actions import playbooks_of
from agent.context import LoopContext, need, step, transition
from agent.proposer.conversation import Conversation
from playbooks.engine import launch_conflict
from playbooks.patches import NoPatch, choose_patch
from state.loop import Decision, LoopState, Proposal

LLM = "llm"
Goto = Literal["approve", "propose", "finish", "abort"]


def files_of(diff: str) -> list[str]:
    """Repo-relative paths a unified diff touches (pure)."""
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", diff, flags=re.M)))


def playbook_proposal(state: LoopState, skipped: list[str]) -> Proposal | None:
    """The best untried finding with a stored patch for this target; skipped ones named in `skipped`."""
    books = {b.id: b for b in playbooks_of(state)}
    for finding in need(state.diagnosis, "diagnosis").findings:
        book = books.get(finding.playbook)
        if book is None or finding.playbook in state.tried:
            continue
        try:
            diff = choose_patch(book, state.target.kind, state.sglang).diff
        except NoPatch as err:  # reported among the skipped findings, not proposed
            skipped.append(f"{book.id} ({err.reason})")
            continue
        conflict = launch_conflict(book, state.target.kind, state.target.launch.argv)
        if conflict is not None:
            skipped.append(f"{book.id} (not proposed: {conflict})")
            continue
        return Proposal(
            iteration=state.iteration,
            playbook=book.id,
            title=finding.title,
            explanation=finding.explanation,
            diff=diff,
            files=files_of(diff),
            expected_gain_share=finding.expected_gain_share,
            expected_gain_ms=finding.expected_gain_ms,
            evidence=finding.evidence,
            binary=book.binary_patches,
        )
    return None


def _proposed(p: Proposal) -> Command[Goto]:
    gain = (
        f"{p.expected_gain_ms:.1f} ms" if p.expected_gain_ms is not None else f"{p.expected_gain_share:.0%}"
    )
    who = f"model {p.origin.model} ({p.origin.usage.tokens} tokens)" if p.origin else p.playbook
    note = f"{who}: expected gain {gain} per token, touches {', '.join(p.files)}"
    return Command(
        update={"proposal": p, "approval": None, "transitions": transition("propose", note)}, goto="approve"
    )


def _stop(reason: str) -> Command[Goto]:
    return Command(
        update={"proposal": None, "stop_reason": reason, "transitions": transition("propose", reason)},
        goto="finish",
    )


def _no_model_reason(state: LoopState) -> str | None:
    """Why no model is asked now, or None when one may be."""
    cfg = state.target.proposer
    if cfg.mode == "playbook":
        return "--proposer playbook: no model is asked"
    if not cfg.model:
        return ""  # the default: playbooks only, and the stop reason stays what it always was
    if state.llm_usage.tokens >= cfg.max_tokens:
        return f"token budget exhausted: {state.llm_usage.tokens} of {cfg.max_tokens} tokens spent"
    used = [d for d in state.decisions if d.playbook == LLM and d.iteration == state.iteration]
    if len(used) >= cfg.max_proposals:
        return f"model proposals for this iteration used ({len(used)}); last: {used[-1].reason}"
    return None


@step
def propose(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Goto]:
    """Propose the next patch: a playbook's (unless --proposer llm), else a model's (unless playbook)."""
    skipped: list[str] = []
    if state.target.proposer.mode != LLM:
        proposal = playbook_proposal(state, skipped)
        if proposal is not None:
            return _proposed(proposal)
    findings = need(state.diagnosis, "diagnosis").findings
    reason = "no untried playbook matches the profile"
    generic = [f for f in findings if f.playbook == "generic"]
    if generic:
        reason += f"; top: {generic[0].title}"
    if skipped:
        reason += "; skipped " + ", ".join(skipped)
    why_not = _no_model_reason(state)
    if why_not is not None:
        return _stop(f"{reason}; {why_not}" if why_not else reason)
    finding = findings[0]
    outcome = Conversation(state, runtime, finding).run()
    usage = state.llm_usage.add(outcome.usage)
    if outcome.proposal is not None:
        cmd = _proposed(outcome.proposal)
        return Command(update={**(cmd.update or {}), "llm_usage": usage}, goto=cmd.goto)
    decision = Decision(
        iteration=state.iteration,
        playbook=LLM,
        verdict="failed",
        reason=f"model proposal dropped: {outcome.reason}",
    )
    note = f"{decision.reason} ({outcome.usage.calls} model calls, {outcome.usage.tokens} tokens)"
    return Command(
        update={"decisions": [decision], "llm_usage": usage, "transitions": transition("propose", note)},
        goto="propose",
    )
