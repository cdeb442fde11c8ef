"""The search's budget (pure): trials, launches, and minutes on the door's clock.

`max_minutes` is a promise that no trial starts that would end past it. A trial of paired blocks
stops at its first verdict, so the one before may have ended early (a large gain decided at its
first look) while the next runs every block it planned: new sessions (`LoopOptions.search_worst_trial`)
count the next trial at the longer of the longest so far and its plan's most blocks at what a block
costs here (`agent/decision/stats/blocks.py`); sessions recorded before it counted the longest so
far. A block is priced at two launches and two measurements as the running server's, and, in
sessions since `LoopOptions.search_block_measured`, at no less than the most a block took in this session's judged trials (the H200 search of
2026-12-06: 31 s priced, 71 s taken: a reference arm measures longer than a fast candidate, and a
block's correctness set and scoring are its time too)."""

from __future__ import annotations

import itertools

from agent.decision.stats.blocks import cost
from playbooks.schema import SEARCH_ID
from state.proposers.search import SearchConfig
from state.sessions.loop import Decision, LoopState


def is_trial(playbook: str) -> bool:
    """Whether a proposal or decision id names a search trial (pure)."""
    return SEARCH_ID.fullmatch(playbook) is not None


def trials_of(state: LoopState) -> list[Decision]:
    """The session's search trials, in order."""
    return [d for d in state.decisions if is_trial(d.source)]


def block_taken_s(state: LoopState, now: float | None) -> float:
    """The most seconds a block of paired launches took in this session's judged trials (pure): each
    trial's time, from its proposal to the next one's (the last one's to `now`), over its blocks; 0
    before one is judged."""
    starts = [*state.search_clock, *([] if now is None else [now])]
    worst = 0.0
    for trial, (start, end) in zip(trials_of(state), itertools.pairwise(starts), strict=False):
        blocks = len(trial.judgement.per_launch) // 2 if trial.judgement is not None else 0
        if blocks:
            worst = max(worst, (end - start) / blocks)
    return worst


def worst_trial_s(state: LoopState, arms: str, now: float | None = None) -> float:
    """Seconds the next trial may take at most (pure): its most blocks (`max_launches_per_arm`, or
    fewer where `[decide] trial_budget_s` affords fewer; never under 2) at two launches and two
    measurements a block, as the running server's launch and the reference's measurement cost (and
    no less than a block took here, `block_taken_s`, in sessions since `search_block_measured`); 0
    for arms without blocks."""
    if arms not in ("alternating", "cross-host"):
        return 0.0
    decide = state.target.decide
    launch_s, measure_s = cost(state)
    block_s = 2.0 * (max(launch_s, 0.0) + max(measure_s, 0.0))
    if state.options.search_block_measured:
        block_s = max(block_s, block_taken_s(state, now))
    if block_s <= 0:
        return 0.0
    blocks = max(2, min(decide.max_launches_per_arm, int(decide.trial_budget_s // block_s)))
    return blocks * block_s


def budget_left(state: LoopState, cfg: SearchConfig, now: float | None = None) -> str | None:
    """Why no further trial is started (the budget is spent), or None; `now` (seconds since the
    epoch, from the door's clock) for `max_minutes`: the next trial is not started when it could
    end past the budget (above), counted from the first trial's proposal."""
    done = len(trials_of(state))
    if done >= cfg.max_trials:
        return f"search budget spent: {done} of {cfg.max_trials} trials"
    arms = state.arms.arms if state.arms is not None else state.target.decide.arms  # `auto` resolved
    most = 2 * state.target.decide.max_launches_per_arm
    per_trial = {"interleaved": 2, "alternating": most, "cross-host": most}.get(arms, 1)
    if cfg.max_launches is not None and state.launches + per_trial > cfg.max_launches:
        return (
            f"search budget spent: {state.launches} launches, a trial needs {per_trial} more "
            f"(max_launches {cfg.max_launches})"
        )
    if cfg.max_minutes is not None and now is not None and state.search_clock:
        starts = [*state.search_clock, now]
        elapsed, longest = now - starts[0], max(b - a for a, b in itertools.pairwise(starts))
        planned = worst_trial_s(state, arms, now) if state.options.search_worst_trial else 0.0
        if elapsed + max(longest, planned) > cfg.max_minutes * 60:
            took = f"a trial took up to {longest / 60:.1f}"
            if planned > longest:
                took = f"the next may take {planned / 60:.1f} (its plan's most blocks; {took})"
            return f"search budget spent: {elapsed / 60:.1f} of {cfg.max_minutes:g} minutes, and {took}"
    return None
