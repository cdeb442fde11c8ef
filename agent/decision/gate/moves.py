"""The numerics test (pure): does a candidate move the baseline's tokens further than the engine
moves them itself?

Every side scores the baseline's own greedy texts teacher-forced (state/measurement/numerics.py):
the reference alone, the unchanged engine under the schedules it varies (batches of other sizes, a
warm prefix cache), and the candidate alone. At each position the move is |log p_side(token) -
log p_reference(token)| of the baseline's token; a prompt's move is its largest.

The test, per prompt: the candidate's move is *beyond* when it exceeds `margin` times the largest
move of the engine's own schedules on that prompt. If the candidate moved tokens the way the
engine does (exchangeable with its S schedules, prompts independent), a prompt is beyond with
probability at most 1/(S+1), so the count of prompts beyond is at most Binomial(P, 1/(S+1)); the
candidate is refused when that count reaches the smallest k whose tail probability is <= `alpha`
(the stated false-reject rate, a bound: the margin only lowers it). With too few prompts for any k,
one prompt beyond refuses, and the bound printed is that rule's (1 - (1 - p)^P).

Two guards beside the count:
- a bug that moves only some prompts (a window cut, a rope offset past a position: long prompts
  only) is refused by the gross rule: any prompt moved beyond `GROSS` times the engine's largest
  move anywhere (its false-reject rate is measured, by benchmarks/numerics_gate.py, not bounded);
- an engine that moved nothing under any schedule (deterministic on this host: the demo on a CPU
  pads every step to one shape and stores FP8 KV) is still an engine that rounds: its yardstick is
  then its logits' rounding, the smallest gap between two distinct top-k logprobs of the reference
  (one unit in the last place of its logits), never zero.
"""

from __future__ import annotations

import itertools
import math

from state.measurement.numerics import ForcedScores, ForcedText, ForcedToken, NumericsVerdict

MARGIN = 2.0
"""The candidate may move a prompt's tokens up to this many times the engine's own largest move."""
ALPHA = 0.01
"""The stated false-reject rate (a bound) for a candidate that moves tokens as the engine does."""
GROSS = 4.0
"""A prompt moved beyond this many times the engine's largest move anywhere refuses on its own."""


def moves(reference: ForcedText, side: ForcedText) -> list[float]:
    """|dlogprob| of the reference's token at each position both scored (pure). A token missing from
    the side's top-k counts at the side's smallest listed logprob (so the move is a lower bound)."""
    out = []
    for r, s in zip(reference.tokens, side.tokens, strict=False):
        if r.logprob is None:  # the reference scores its own greedy tokens: never missing
            continue
        lp = s.logprob if s.logprob is not None else min(s.top.values(), default=-math.inf)
        out.append(abs(lp - r.logprob) if math.isfinite(lp) else math.inf)
    return out


def flips(side: ForcedScores) -> int:
    """Positions where the side's most likely token is not the reference's (pure)."""
    return sum(1 for t in side.texts for p in t.tokens if p.rank != 1)


def kl(reference: ForcedToken, side: ForcedToken) -> float:
    """KL(reference || side) on the reference's top-k with the rest lumped into one tail (pure);
    a token the side did not list counts at the side's smallest listed probability."""
    if not reference.top or not side.top:
        return 0.0
    floor = min(side.top.values())
    total, p_in, q_in = 0.0, 0.0, 0.0
    for tok, lp in reference.top.items():
        lq = side.top.get(tok, floor)
        p, q = math.exp(lp), math.exp(lq)
        total += p * (lp - lq)
        p_in, q_in = p_in + p, q_in + q
    p_tail, q_tail = max(1.0 - p_in, 0.0), max(1.0 - q_in, 1e-12)
    if p_tail > 1e-12:
        total += p_tail * (math.log(p_tail) - math.log(q_tail))
    return max(total, 0.0)


def rounding(reference: ForcedScores) -> float:
    """The reference's logits' rounding (pure): the smallest positive gap between two of its top-k
    logprobs at one position (a difference of logprobs is one of logits); 0 where none is listed."""
    ranked = [sorted(p.top.values(), reverse=True) for t in reference.texts for p in t.tokens]
    gaps = [a - b for v in ranked for a, b in itertools.pairwise(v) if a - b > 1e-6]
    return min(gaps, default=0.0)


def tail(n: int, p: float, k: int) -> float:
    """P(Binomial(n, p) >= k) (pure)."""
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def needed(n: int, schedules: int, alpha: float = ALPHA) -> tuple[int, float]:
    """Prompts beyond that refuse, and the false-reject bound of that rule (pure)."""
    p = 1.0 / (schedules + 1)
    for k in range(1, n + 1):
        if tail(n, p, k) <= alpha:
            return k, tail(n, p, k)
    return 1, 1.0 - (1.0 - p) ** n


def judge(
    reference: ForcedScores,
    noise: list[ForcedScores],
    candidate: ForcedScores,
    *,
    texts_equal: bool,
    declared_exact: bool = False,
    margin: float = MARGIN,
    alpha: float = ALPHA,
) -> NumericsVerdict:
    """The verdict on `candidate` (pure): `exact` when its greedy texts equal the reference's
    (`texts_equal`, where the schedule is controlled) and it moved no token's logprob; else `within`
    or `beyond` by the test above (a scale error that flips no greedy token still moves them all).
    A candidate that `declared_exact` itself passes only as `exact` (the verdict says which it is)."""
    if not noise:
        raise ValueError("the engine's own noise was not measured: no schedule to judge against")
    n = len(reference.texts)
    if any(len(s.texts) != n for s in [*noise, candidate]):
        raise ValueError("the sides were scored on different sets of prompts")
    per_engine = [
        [max(moves(r, s), default=0.0) for r, s in zip(reference.texts, sc.texts, strict=True)]
        for sc in noise
    ]
    per_cand = [max(moves(r, c), default=0.0) for r, c in zip(reference.texts, candidate.texts, strict=True)]
    floor = rounding(reference) if not any(any(row) for row in per_engine) else 0.0
    engine_by_prompt = [max(*col, floor) for col in zip(*per_engine, strict=True)]
    beyond = sum(1 for c, e in zip(per_cand, engine_by_prompt, strict=True) if c > margin * e)
    gross = sum(1 for c in per_cand if c > GROSS * max(engine_by_prompt, default=0.0))
    k, bound = needed(n, len(noise), alpha)
    worst = max(range(len(noise)), key=lambda i: max(per_engine[i], default=0.0))
    kls = [
        kl(r, c)
        for rt, ct in zip(reference.texts, candidate.texts, strict=True)
        for r, c in zip(rt.tokens, ct.tokens, strict=False)
    ]
    moved = any(c > 0 for c in per_cand)
    refused = beyond >= k or gross or math.inf in per_cand
    verdict = "exact" if texts_equal and not moved else "beyond" if refused else "within"
    return NumericsVerdict(
        verdict=verdict,
        max_dlogprob=max(per_cand, default=0.0),
        engine_max_dlogprob=max(max(per_engine[worst], default=0.0), floor),
        engine_schedule=noise[worst].schedule
        if not floor
        else "its logits' rounding: no schedule moved them",
        gross=gross,
        flips=flips(candidate),
        engine_flips=max(flips(s) for s in noise),
        max_kl=max(kls, default=0.0),
        positions=sum(len(t.tokens) for t in candidate.texts),
        prompts_beyond=beyond,
        prompts=n,
        needed=k,
        false_reject=bound,
        margin=margin,
        declared_exact=declared_exact,
        note="too few prompts for the binomial test: one prompt beyond refuses"
        if k == 1 and bound > alpha
        else "",
    )


def line(v: NumericsVerdict) -> str:
    """The verdict in one line, with its figures (pure), e.g. `within the engine's numerics: max
    |dlogprob| 0.012 vs the engine's own 0.020 (batch of 4); 1/8 prompts beyond 2x the engine's
    own (refused at 3; false-reject <= 1.0%)`."""
    gross = f", {v.gross} beyond {GROSS:g}x its largest anywhere" if v.gross else ""
    figures = (
        f"max |dlogprob| {fmt(v.max_dlogprob)} vs the engine's own {fmt(v.engine_max_dlogprob)} "
        f"({v.engine_schedule}); {v.prompts_beyond}/{v.prompts} prompts beyond {v.margin:g}x the "
        f"engine's own (refused at {v.needed}; false-reject <= {v.false_reject:.1%}){gross}; top-1 "
        f"flips {v.flips} vs the engine's {v.engine_flips}"
    )
    if v.verdict == "exact":
        head = "exact (greedy texts and their logprobs identical)"
    elif v.verdict == "within":
        head = "within the engine's numerics"
        if v.declared_exact:
            head += ", but the change declared itself exact: refused"
    else:
        head = "beyond the engine's numerics"
    return f"{head}: {figures}"


def fmt(x: float) -> str:
    """A logprob move, three significant places (pure)."""
    return "inf" if math.isinf(x) else f"{x:.3g}"
