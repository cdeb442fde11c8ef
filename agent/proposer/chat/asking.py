"""How many model-written candidates to ask for, and the round of conversations that asks for them.

Without `[[hosts]]` a round is one conversation, as it always was. With several hosts the model
is asked for one candidate per host (tried at most `--parallel` at once, as playbook candidates
are; the rest wait their turn): conversation k is shown the candidates 1..k-1 of the round and
told to propose something different, and a patch identical to one of them is sent back for repair. The candidates of a round are named `llm-1`,
`llm-2`, ... (a single model proposal stays `llm`), so trials, decisions and `--only` can tell
them apart. `max_proposals` counts rounds: an iteration holds at most `max_proposals` x the
round's size conversations (failed ones included).

All conversations of a round run one after another inside the `propose` node: their model calls
go through the door in a fixed order, so a node re-run after a crash asks the same questions and
pays for none of them twice (each conversation's first message names the ones before it, so no
two conversations send the same request).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from langgraph.runtime import Runtime

from agent.context import LoopContext
from agent.proposer.briefing.evidence import port_patch
from agent.proposer.chat.conversation import Conversation
from playbooks.schema import MODEL_ID, Playbook
from state.profiling.diagnosis import Finding
from state.proposers.proposer import LlmUsage
from state.sessions.loop import Decision, LoopState, Proposal

LLM = "llm"


def is_model(playbook: str) -> bool:
    """Whether a proposal or decision id names a model-written candidate (`llm`, `llm-2`); the
    playbook schema refuses these ids (pure)."""
    return MODEL_ID.fullmatch(playbook) is not None


def needs_human(state: LoopState, proposals: Sequence[Proposal]) -> bool:
    """Whether these proposals wait for `perfloop approve` whatever `--approve` says: model-written
    ones, unless the target's `[proposer] approve = "auto"` (pure)."""
    return state.target.proposer.approve == "manual" and any(p.origin is not None for p in proposals)


def round_size(state: LoopState) -> int:
    """Candidates one round asks the model for: one per host of `[[hosts]]` when there are two or
    more, else 1 (pure). `--parallel` caps how many are tried at once, as for playbooks."""
    hosts = len(state.target.hosts)
    return hosts if hosts >= 2 else 1


def model_decisions(state: LoopState) -> list[Decision]:
    """One decision per model conversation of this iteration so far, whether it gave a patch or
    not (pure)."""
    return [d for d in state.decisions if is_model(d.source) and d.iteration == state.iteration]


def no_model_reason(state: LoopState) -> str | None:
    """Why no model is asked now, or None when one may be; "" for the default of no model."""
    cfg = state.target.proposer
    if cfg.mode == "playbook":
        return "--proposer playbook: no model is asked"
    if not cfg.model:
        return ""  # the default: playbooks only, and the stop reason stays what it always was
    if state.llm_usage.tokens >= cfg.max_tokens:
        return f"token budget exhausted: {state.llm_usage.tokens} of {cfg.max_tokens} tokens spent"
    used = model_decisions(state)
    if len(used) >= cfg.max_proposals * round_size(state):
        return f"model proposals for this iteration used ({len(used)}); last: {used[-1].reason}"
    return None


@dataclass
class Round:
    """What a round of conversations gave: the candidates, a failed decision per conversation that
    gave none, and what the round's model calls cost."""

    proposals: list[Proposal] = field(default_factory=list)
    failed: list[Decision] = field(default_factory=list)
    usage: LlmUsage = field(default_factory=LlmUsage)


def ask_round(
    state: LoopState,
    runtime: Runtime[LoopContext],
    finding: Finding,
    skipped: Sequence[str] = (),
    books: Sequence[Playbook] = (),
) -> Round:
    """Ask the model for a round of candidates (see the module doc). Each conversation sees the
    budgets as the earlier ones of the round left them, why matching playbooks were skipped
    (`skipped`), and a stored patch of `books` to port when one matched but does not fit."""
    port = port_patch(state, books)
    size = round_size(state)
    room = state.target.proposer.max_proposals * size - len(model_decisions(state))
    out = Round()
    now = state
    for _ in range(max(1, min(size, room))):
        if out.proposals or out.failed:
            now = state.model_copy(
                update={
                    "llm_usage": state.llm_usage.add(out.usage),
                    "decisions": [*state.decisions, *out.failed],
                }
            )
            if no_model_reason(now) is not None:
                break
        outcome = Conversation(now, runtime, finding, out.proposals, skipped, port).run()
        out.usage = out.usage.add(outcome.usage)
        if outcome.proposal is not None:
            name = f"{LLM}-{len(out.proposals) + 1}" if size > 1 else LLM
            out.proposals.append(outcome.proposal.model_copy(update={"source": name}))
        else:
            out.failed.append(
                Decision(
                    iteration=state.iteration,
                    source=LLM,
                    verdict="failed",
                    reason=f"model proposal dropped: {outcome.reason}",
                )
            )
    return out
