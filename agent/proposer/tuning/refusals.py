"""The launch-option search after a trial the output gate refused for its math (pure): the same trial
without the knobs that moved it follows, so an exact win bundled with a math-moving knob is never lost
to it; which knob moved the math is then measured in the session, not only declared (`Knob.numerics`).
"""

from __future__ import annotations

import itertools

from agent.proposer.tuning.knobs import config_of, with_config
from state.proposers.search import Knob, KnobValue
from state.sessions.loop import Decision, LoopState


def refused_for_math(d: Decision) -> bool:
    """Whether the output gate refused the trial for its math: its texts moved and the numerics gate
    found it beyond the engine's own (or the exact gate saw them change) (pure)."""
    if d.numerics is not None:
        return not d.numerics.passed
    return d.verdict == "rejected" and d.outputs_identical is False


def without_math(
    state: LoopState, knobs: list[Knob], seen: set[tuple[str, ...]], trials: list[Decision]
) -> dict[str, KnobValue] | None:
    """After a trial refused for its math, the same trial without the knobs that moved it, so a win
    bundled with them is not lost (pure): first without every knob that declares `numerics`, then
    without each changed knob in turn (the session measures which one moved the math: a follow-up
    that passes names it); None when the last trial was not so refused or every such config was tried."""
    if not trials or not refused_for_math(trials[-1]):
        return None
    config = config_of(trials[-1].launch_argv or [], knobs)
    base = config_of(state.argv, knobs)
    changed = [k for k in knobs if k.name in config and config[k.name] != base.get(k.name)]
    declared = [k for k in changed if k.numerics]
    drops = ([declared] if declared else []) + [[k] for k in changed if len(changed) > 1]
    for drop in drops:
        names = {k.name for k in drop}
        kept = {n: v for n, v in config.items() if n not in names}
        restored = {k.name: base[k.name] for k in drop if k.name in base}
        candidate = {**kept, **restored}
        if candidate != base and tuple(with_config(state.argv, knobs, candidate)) not in seen:
            return candidate
    return None


def math_movers(state: LoopState, trials: list[Decision]) -> list[str]:
    """Knobs the session measured to move the math (pure): a search trial (of `trials`) refused for
    it, followed by the same trial without the knob passing the gate."""
    cfg = state.target.search
    knobs = cfg.knobs if cfg else []
    found = []
    for before, after in itertools.pairwise(trials):
        if not refused_for_math(before) or refused_for_math(after) or after.verdict == "failed":
            continue
        a, b = config_of(before.launch_argv or [], knobs), config_of(after.launch_argv or [], knobs)
        found += [n for n in a if a[n] != b.get(n) and n not in found]
    return found
