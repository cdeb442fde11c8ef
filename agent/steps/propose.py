"""The propose step: a playbook's stored patch when one fits, else (or always) a model-written one.

`--proposer playbook` never calls a model; `llm` never uses a stored patch (playbooks still
diagnose); `auto` tries the playbooks first. A model's conversation (agent/proposer/) runs inside
this node as recorded door calls; a conversation that ends without a valid patch is recorded as a
failed `llm` decision with its reason, and the step runs again to try once more (up to
`max_proposals` rounds per iteration) or to stop with that reason.

With `[[hosts]]`, several candidates are tried at once: every playbook that fits (unless `llm`),
or, when no playbook fits (or under `llm`), a round of model candidates, one per host
(agent/proposer/chat/asking.py). Two or more go to the `trial` fan-out; a single one takes the usual
path here.
"""

from __future__ import annotations

import re
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agent.context import LoopContext, call, need, step, transition
from agent.decision.gate.correctness import refusal
from agent.proposer.chain import rank, ranking_note
from agent.proposer.chat.asking import LLM, ask_round, needs_human, no_model_reason
from agent.proposer.tuning.budget import is_trial
from agent.proposer.tuning.search import search_proposal
from agent.steps.actions import playbooks_of
from agent.steps.fanout import fan_out
from playbooks import launch
from playbooks.engine import launch_conflict
from playbooks.patches import NoPatch, choose_patch
from playbooks.schema import Playbook
from state.door.calls import ClockArgs
from state.sessions.loop import LoopState, Proposal
from state.sessions.updates import LoopUpdate
from tools.hosts import info

Goto = Literal["approve", "propose", "trial", "chain", "finish", "abort"]


def files_of(diff: str) -> list[str]:
    """Repo-relative paths a unified diff touches (pure)."""
    return sorted(set(re.findall(r"^\+\+\+ b/(\S+)", diff, flags=re.M)))


def launch_fix(
    state: LoopState, book: Playbook, books: dict[str, Playbook]
) -> tuple[list[str] | None, str | None]:
    """(the launch command the playbook's launch change gives, None) or (None, why it is not
    proposed): no change for this kind, options already so, or a conflict with a patch in the tree
    or still to be tried."""
    edits = book.launch.get(state.target.kind)
    if not edits:
        return None, None
    before = state.argv
    after = launch.edited_argv(before, edits)
    if after == before:
        return None, f"{book.id} (launch options already as its fix sets them)"
    relevant = {d.source for d in state.decisions if d.verdict == "accepted"}
    findings = need(state.diagnosis, "diagnosis").findings
    relevant |= {f.playbook for f in findings if f.playbook not in state.tried}
    conflict = launch.change_conflict(
        state.target.kind, before, after, [books[i] for i in relevant if i in books]
    )
    if conflict is not None:
        return None, f"{book.id} (not proposed: {conflict})"
    return after, None


def playbook_proposal(
    state: LoopState, skipped: list[str], exclude: frozenset[str] = frozenset()
) -> Proposal | None:
    """The best untried finding (not in `exclude`) with a stored patch or a launch-option change
    for this target; skipped ones named in `skipped`."""
    books = {b.id: b for b in playbooks_of(state)}
    for finding in need(state.diagnosis, "diagnosis").findings:
        book = books.get(finding.playbook)
        if book is None or finding.playbook in state.tried or finding.playbook in exclude:
            continue
        argv, why = launch_fix(state, book, books)
        if why is not None:
            skipped.append(why)
            continue
        if argv is None:
            try:
                diff = choose_patch(book, state.target.kind, state.sglang, state.options.playbook_files).diff
            except NoPatch as err:  # reported among the skipped findings, not proposed
                skipped.append(f"{book.id} ({err.reason})")
                continue
            conflict = launch_conflict(book, state.target.kind, state.argv)
            if conflict is not None:
                skipped.append(f"{book.id} (not proposed: {conflict})")
                continue
        else:
            diff = ""
        return Proposal(
            iteration=state.iteration,
            source=book.id,
            title=finding.title,
            explanation=finding.explanation,
            diff=diff,
            files=files_of(diff),
            expected_gain_share=finding.expected_gain_share,
            expected_gain_ms=finding.expected_gain_ms,
            evidence=finding.evidence,
            binary=book.binary_patches,
            exact=book.exact,
            launch_argv=argv,
            predicted_speedup=finding.predicted_speedup,
            paired_with=finding.paired_with,
            paired_speedup=finding.paired_speedup,
        )
    return None


def parallel_candidates(state: LoopState) -> list[Proposal]:
    """Every playbook proposal for this iteration, best first, when they are to be tried at once
    on the target's `[[hosts]]` (playbook proposals); else none."""
    if not state.target.hosts or state.target.proposer.mode in (LLM, "search", "chain"):
        return []
    found: list[Proposal] = []
    while (p := playbook_proposal(state, [], frozenset(q.source for q in found))) is not None:
        found.append(p)
    return found


def _proposed(p: Proposal, state: LoopState) -> Command[Goto]:
    gain = (
        f"{p.expected_gain_ms:.1f} ms" if p.expected_gain_ms is not None else f"{p.expected_gain_share:.0%}"
    )
    if p.predicted_speedup is not None:
        gain += f" ({p.predicted_speedup:.2f}x predicted"
        gain += f"; {p.paired_speedup:.2f}x with {p.paired_with})" if p.paired_with else ")"
    who = f"model {p.origin.model} ({p.origin.usage.tokens} tokens)" if p.origin else p.source
    what = (
        f"launch options: {launch.describe(state.argv, p.launch_argv)}"
        if p.launch_argv is not None
        else f"touches {', '.join(p.files)}"
    )
    note = f"{who}: expected gain {gain} per token, {what}"
    if is_trial(p.source):
        note = f"{p.title}; {what}"
    return Command(
        update=LoopUpdate(proposal=p, approval=None, transitions=transition("propose", note)), goto="approve"
    )


def chain_links(state: LoopState) -> int:
    """How many changes a chain session kept so far (pure)."""
    return sum(1 for d in state.decisions if d.verdict == "accepted")


def ending(state: LoopState) -> Literal["chain", "finish"]:
    """Where a session whose rounds are over goes: a chain session with two or more kept links to
    `chain` (the whole chain measured against the baseline), every other to `finish` (pure)."""
    return "chain" if state.target.proposer.mode == "chain" and chain_links(state) >= 2 else "finish"


def _stop(reason: str, state: LoopState | None = None) -> Command[Goto]:
    return Command(
        update=LoopUpdate(proposal=None, stop_reason=reason, transitions=transition("propose", reason)),
        goto=ending(state) if state is not None else "finish",
    )


def chain_proposal(
    state: LoopState, runtime: Runtime[LoopContext], skipped: list[str]
) -> Command[Goto] | None:
    """`--proposer chain`: every playbook proposal that fits and the search's next trial, ranked by
    predicted gain per launch-minute (agent/proposer/chain.py); the best is proposed, with the
    ranking in its note. None when there is none (the model, if any, is asked next)."""
    found: list[Proposal] = []
    while (
        p := playbook_proposal(state, skipped if not found else [], frozenset(q.source for q in found))
    ) is not None:
        found.append(p)
    cfg, now = state.target.search, None
    if cfg is not None:
        now = call(runtime, info.clock, ClockArgs()).epoch_s if cfg.max_minutes is not None else None
        trial, what = search_proposal(state, now)
        if trial is not None:
            found.append(trial)
        else:
            skipped.append(f"search ({what})")
    if not found:
        return None
    ranked = rank(state, found)
    best = ranked[0].proposal
    cmd = _proposed(best, state)
    update = dict(cmd.update or {})
    note = update["transitions"][0]
    update["transitions"] = [note.model_copy(update={"note": f"{note.note}; {ranking_note(ranked)}"})]
    if is_trial(best.source) and now is not None:
        update["search_clock"] = [*state.search_clock, now]
    return Command(update=LoopUpdate(**update), goto=cmd.goto)


def _at_once(state: LoopState, batch: list[Proposal], update: LoopUpdate) -> Command[Goto]:
    """Candidates for the `[[hosts]]`: sent to their trials, or first to approval (one answer for
    the whole batch) under manual approval."""
    names = ", ".join(p.source for p in batch)
    if state.options.approve == "manual" or needs_human(state, batch) or refusal(state) is not None:
        note = f"{len(batch)} candidates for [[hosts]], waiting for approval: {names}"
        update |= {"candidates": batch, "proposal": None, "approval": None}
        return Command(update=LoopUpdate(**update, transitions=transition("propose", note)), goto="approve")
    sends, fanned = fan_out(state, batch)
    names = ", ".join(f"{s.arg.proposal.source} on {s.arg.host.name}" for s in sends)
    note = f"{len(batch)} candidates, tried at once on [[hosts]]: {names}"
    return Command(update=LoopUpdate(**update, **fanned, transitions=transition("propose", note)), goto=sends)


@step
def propose(state: LoopState, runtime: Runtime[LoopContext]) -> Command[Goto]:
    """Propose the next patch: a playbook's (unless --proposer llm), else a model's (unless playbook)."""
    skipped: list[str] = []
    batch = parallel_candidates(state)
    if len(batch) >= 2:
        return _at_once(state, batch, {})
    mode = state.target.proposer.mode
    if mode == "chain":
        chained = chain_proposal(state, runtime, skipped)
        if chained is not None:
            return chained
    elif mode not in (LLM, "search"):
        proposal = playbook_proposal(state, skipped)
        if proposal is not None:
            return _proposed(proposal, state)
    if mode not in (LLM, "playbook", "chain") and state.target.search is not None:  # the search (`[search]`)
        cfg = state.target.search
        now = call(runtime, info.clock, ClockArgs()).epoch_s if cfg.max_minutes is not None else None
        trial, what = search_proposal(state, now)
        if trial is not None:
            cmd = _proposed(trial, state)
            if now is None:
                return cmd
            clock = LoopUpdate(search_clock=[*state.search_clock, now])
            return Command(update=LoopUpdate(**(cmd.update or {}), **clock), goto=cmd.goto)
        if mode == "search":
            return _stop(what)
        skipped.append(f"search ({what})")
    findings = need(state.diagnosis, "diagnosis").findings
    reason = "no untried playbook matches the profile"
    generic = [f for f in findings if f.playbook == "generic"]
    if generic:
        reason += f"; top: {generic[0].title}"
    if skipped:
        reason += "; skipped " + ", ".join(skipped)
    why_not = no_model_reason(state)
    if why_not is not None:
        return _stop(f"{reason}; {why_not}" if why_not else reason, state)
    asked = ask_round(state, runtime, findings[0], skipped, playbooks_of(state))
    update: LoopUpdate = {"llm_usage": state.llm_usage.add(asked.usage), "decisions": asked.failed}
    if len(asked.proposals) >= 2:
        return _at_once(state, asked.proposals, update)
    if asked.proposals:
        cmd = _proposed(asked.proposals[0], state)
        return Command(update=LoopUpdate(**(cmd.update or {}), **update), goto=cmd.goto)
    why = "; ".join(d.reason for d in asked.failed)
    note = f"{why} ({asked.usage.calls} model calls, {asked.usage.tokens} tokens)"
    return Command(update=LoopUpdate(**update, transitions=transition("propose", note)), goto="propose")
