"""The numerics test (pure): does a candidate move the baseline's tokens further than the engine
moves them itself?

Every side scores the baseline's own greedy texts teacher-forced (state/measurement/numerics.py):
the reference alone, the unchanged engine under the schedules it varies (batches of other sizes, a
warm prefix cache) and, where the engine can compute the same model in float32, its precision
reference (how far the engine's own rounding puts the baseline from its math), and the candidate
alone. At each position the move is |log p_side(token) - log p_reference(token)| of the baseline's
token; a prompt's move is its mean over the prompt's positions (a typical move, not the largest: a
change of rounding at random weights moves one near-tied position as far as a real bug does, while
a bug moves every position further).

The test, where the engine computed the same model in float32 beside the baseline (the precision
reference) and there are at least FEW prompts: per prompt the ratio of the candidate's distance from
the float32 math to the baseline's own (the mean |dlogprob| of the baseline's tokens against the
reference's scores). A change of rounding (compile, fusion, a reordered or re-split reduction) is
another computation of the same math, as far from it as the baseline on average, or nearer (float32
attention); a bug adds its own move to the rounding and lands further. The candidate is *beyond*
when the one-sided lower confidence bound of the geometric mean of those ratios (Student's t over the
prompts, at 1 - `alpha`) exceeds `margin`: one exactly as precise as the baseline is refused with
probability `alpha` (the stated false-reject rate). Without a precision reference (or too few
prompts) the ratio is the candidate's move of the baseline's tokens over the engine's own there (its
furthest side on that prompt), the same bound: a candidate that moves them no more than the engine's
own schedules do passes. A prompt the candidate did not move counts at 1/16 (the log stays finite).
A prompt no schedule moved is held to one unit of the logits' rounding (below), not to zero (new
sessions; `unit_floor`): on a GPU a batch moves some prompts and leaves others bit-identical, and a
compile moving those was refused at 10^5 times the engine's move (an H100 chain, 2026-12-06).

Two guards beside it:
- a bug that moves only some prompts (a window cut, a rope offset past a position: long prompts
  only) is refused by the gross rule: any prompt moved beyond `GROSS` times the engine's largest
  mean move on any prompt (its false-reject rate is measured, by benchmarks/numerics_gate.py);
- an engine that moved nothing on any side (deterministic on this host, and no precision reference)
  is still an engine that rounds: its yardstick is then its logits' rounding, the smallest gap
  between two distinct top-k logprobs of the reference (one unit in the last place), never zero.
"""

from __future__ import annotations

import itertools
import math
import statistics

from agent.decision.stats.replicates import t_quantile
from state.measurement.numerics import PRECISE, ForcedScores, ForcedText, ForcedToken, NumericsVerdict

MARGIN = 1.0
"""The candidate's typical move may be up to this many times the engine's own (geometric mean)."""
ALPHA = 0.01
"""The stated false-reject rate, for a candidate whose typical move is the margin times the engine's."""
GROSS = 4.0
"""A prompt moved beyond this many times the engine's largest mean move anywhere refuses on its own."""
UNMOVED = 1 / 16
"""A prompt the candidate did not move counts at this share of the engine's move there."""
FEW = 4
"""Fewer prompts than this: no interval, the point estimate decides (and the verdict says so)."""


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


def typical(reference: ForcedScores, side: ForcedScores) -> list[float]:
    """Per prompt, the mean move of the reference's tokens on `side` (pure)."""
    return [
        statistics.fmean(m) if (m := moves(r, s)) else 0.0
        for r, s in zip(reference.texts, side.texts, strict=True)
    ]


def largest(reference: ForcedScores, side: ForcedScores) -> list[float]:
    """Per prompt, the largest move of the reference's tokens on `side` (pure)."""
    return [max(moves(r, s), default=0.0) for r, s in zip(reference.texts, side.texts, strict=True)]


def from_math(reference: ForcedScores, noise: list[ForcedScores]) -> list[float]:
    """Per prompt, the baseline's distance from the float32 math (a unit of its logits' rounding at
    least) where that is the test's yardstick: a precision reference among `noise`, FEW prompts or
    more, and a reference that is not already the math (a server in float32); else [] (pure)."""
    precise = next((s for s in noise if s.schedule == PRECISE), None)
    if precise is None or len(reference.texts) < FEW or not any(base := typical(precise, reference)):
        return []
    unit = rounding(reference) or 1e-9  # a prompt the reference computes as its math: one unit
    return [max(b, unit) for b in base]


def bound(logs: list[float], alpha: float) -> tuple[float, float]:
    """(mean, one-sided lower bound at 1 - alpha) of `logs` by Student's t (pure); the mean twice
    below FEW values."""
    mean = statistics.fmean(logs)
    if len(logs) < FEW or any(math.isinf(x) for x in logs):
        return mean, mean
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    return mean, mean - t_quantile(1 - alpha, len(logs) - 1) * se


def judge(
    reference: ForcedScores,
    noise: list[ForcedScores],
    candidate: ForcedScores,
    *,
    texts_equal: bool,
    declared_exact: bool = False,
    math_distance: bool = True,
    unit_floor: bool = True,
    margin: float = MARGIN,
    alpha: float = ALPHA,
) -> NumericsVerdict:
    """The verdict on `candidate` (pure): `exact` when its greedy texts equal the reference's
    (`texts_equal`, where the schedule is controlled) and it moved no token's logprob; else `within`
    or `beyond` by the test above (a scale error that flips no greedy token still moves them all).
    A candidate that `declared_exact` itself passes only as `exact` (the verdict says which it is).
    `math_distance` False: the engine's own moves are the yardstick even beside a precision reference
    (sessions recorded before the distance from the float32 math); `unit_floor` False: a prompt no
    schedule moved is held to zero, not to one unit of rounding (sessions recorded before it)."""
    if not noise:
        raise ValueError("the engine's own noise was not measured: no schedule to judge against")
    n = len(reference.texts)
    if any(len(s.texts) != n for s in [*noise, candidate]):
        raise ValueError("the sides were scored on different sets of prompts")
    engine = [typical(reference, s) for s in noise]
    cand = typical(reference, candidate)
    floor = rounding(reference) if not any(any(row) for row in engine) else 0.0
    unit = rounding(reference) if unit_floor else 0.0
    own = [max(*col, floor, unit, 1e-9) for col in zip(*engine, strict=True)]
    precise = next((s for s in noise if s.schedule == PRECISE), None)
    math_base = from_math(reference, noise) if math_distance else []
    math_cand = typical(precise, candidate) if precise is not None and math_base else []
    if math_base:  # the distance from the float32 math, over the baseline's
        logs = [
            math.inf if math.isinf(c) else math.log(max(c, b * UNMOVED) / b)
            for c, b in zip(math_cand, math_base, strict=True)
        ]
    else:
        logs = [
            math.inf if math.isinf(c) else math.log(max(c, e * UNMOVED) / e)
            for c, e in zip(cand, own, strict=True)
        ]
    mean, low = bound(logs, alpha)
    beyond = sum(1 for c, e in zip(cand, own, strict=True) if c > margin * e)
    gross = sum(1 for c in cand if c > GROSS * max(own))
    furthest = max(range(len(noise)), key=lambda i: statistics.fmean(engine[i]) if engine[i] else 0.0)
    top = [max(largest(reference, s), default=0.0) for s in noise]
    kls = [
        kl(r, c)
        for rt, ct in zip(reference.texts, candidate.texts, strict=True)
        for r, c in zip(rt.tokens, ct.tokens, strict=False)
    ]
    moved = any(c > 0 for c in cand)
    refused = low > math.log(margin) or gross > 0 or math.inf in cand
    verdict = "exact" if texts_equal and not moved else "beyond" if refused else "within"
    every = [m for r, c in zip(reference.texts, candidate.texts, strict=True) for m in moves(r, c)]
    return NumericsVerdict(
        verdict=verdict,
        max_dlogprob=max(every, default=0.0),
        engine_max_dlogprob=max(max(top, default=0.0), floor),
        engine_schedule=noise[furthest].schedule if not floor else "its logits' rounding: no side moved them",
        mean_dlogprob=statistics.fmean(every) if every else 0.0,
        engine_mean_dlogprob=max(statistics.fmean(engine[furthest]) if engine[furthest] else 0.0, floor),
        yardstick="precise" if math_base else "engine",
        precise_dlogprob=statistics.fmean(math_cand) if math_cand else 0.0,
        baseline_precise_dlogprob=statistics.fmean(math_base) if math_base else 0.0,
        ratio=math.exp(min(mean, 700.0)),
        ratio_low=math.exp(min(low, 700.0)),
        gross=gross,
        flips=flips(candidate),
        engine_flips=max(flips(s) for s in noise),
        max_kl=max(kls, default=0.0),
        positions=sum(len(t.tokens) for t in candidate.texts),
        prompts_beyond=beyond,
        prompts=n,
        false_reject=alpha,
        margin=margin,
        declared_exact=declared_exact,
        note=f"too few prompts for the interval ({n} < {FEW}): the typical move alone decides"
        if n < FEW
        else "",
    )


def line(v: NumericsVerdict) -> str:
    """The verdict in one line, with its figures (pure), e.g. `within the engine's numerics: distance
    from the float32 math 0.073 a token vs the baseline's own 0.068; 1.08x per prompt (>= 0.96x at 99%,
    refused above 1x); moved the baseline's tokens: mean |dlogprob| 0.033 a token vs the engine's own
    0.068 (float32 precision reference); max 0.84 vs 0.71; top-1 flips 30 vs 0`."""
    gross = f"; {v.gross} prompt(s) beyond {GROSS:g}x its largest anywhere" if v.gross else ""
    test = (
        f"{v.ratio:.2f}x per prompt (>= {v.ratio_low:.2f}x at {1 - v.false_reject:.0%}, refused above "
        f"{v.margin:g}x){gross}"
    )
    moved = (
        f"mean |dlogprob| {fmt(v.mean_dlogprob)} a token vs the engine's own {fmt(v.engine_mean_dlogprob)} "
        f"({v.engine_schedule})"
    )
    if v.yardstick == "precise":
        figures = (
            f"distance from the float32 math {fmt(v.precise_dlogprob)} a token vs the baseline's own "
            f"{fmt(v.baseline_precise_dlogprob)}; {test}; moved the baseline's tokens: {moved}"
        )
    else:
        figures = f"{moved}; {test}"
    figures += f"; max {fmt(v.max_dlogprob)} vs {fmt(v.engine_max_dlogprob)}; top-1 flips {v.flips} vs the engine's {v.engine_flips}"
    if v.note:
        figures += f" ({v.note})"
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
