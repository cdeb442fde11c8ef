"""The numerics test (agent/decision/gate/moves.py) on made scores: its verdicts, its stated
false-reject rate checked by simulation, and its power against a moved model."""

import math
import random

import pytest

from agent.decision.gate import moves as numerics
from state.measurement.numerics import ForcedScores, ForcedText, ForcedToken


def side(name: str, logprobs: list[list[float]], ranks: list[list[int]] | None = None) -> ForcedScores:
    texts = []
    for i, lps in enumerate(logprobs):
        toks = [
            ForcedToken(
                token="a",
                logprob=lp,
                rank=(ranks[i][j] if ranks else 1),
                top={"a": lp, "b": lp - 1 / 256, "c": lp - 2},
            )
            for j, lp in enumerate(lps)
        ]
        texts.append(ForcedText(prompt=f"p{i}", continuation="a" * len(lps), tokens=toks))
    return ForcedScores(schedule=name, texts=texts)


def moved(base: list[list[float]], rng: random.Random, scale: float, name: str) -> ForcedScores:
    return side(name, [[lp + rng.gauss(0, scale) for lp in row] for row in base])


BASE = [[-0.1 - 0.05 * j for j in range(12)] for _ in range(8)]


def test_exact_needs_the_texts_and_their_logprobs_unmoved():
    rng = random.Random(0)
    ref = side("alone", BASE)
    noise = [moved(BASE, rng, 0.01, f"batch of {n}") for n in (2, 4, 8)]
    same = side("candidate", BASE)
    v = numerics.judge(ref, noise, same, texts_equal=True)
    assert v.verdict == "exact" and v.passed and "logprobs identical" in numerics.line(v)
    scaled = moved(BASE, rng, 0.5, "candidate")  # an lm_head scale error: no greedy token flips
    v = numerics.judge(ref, noise, scaled, texts_equal=True)
    assert v.verdict == "beyond" and not v.passed


def test_a_candidate_moving_like_the_engine_is_within_and_a_moved_model_beyond():
    rng = random.Random(1)
    ref = side("alone", BASE)
    noise = [moved(BASE, rng, 0.01, f"batch of {n}") for n in (2, 4, 8)]
    within = numerics.judge(ref, noise, moved(BASE, rng, 0.01, "candidate"), texts_equal=False)
    beyond = numerics.judge(ref, noise, moved(BASE, rng, 0.1, "candidate"), texts_equal=False)
    assert within.verdict == "within" and within.passed
    assert beyond.verdict == "beyond" and not beyond.passed
    assert beyond.ratio_low > 1 and beyond.mean_dlogprob > 5 * beyond.engine_mean_dlogprob
    assert within.ratio < 1 and within.prompts_beyond < within.prompts
    assert "beyond the engine's numerics: mean |dlogprob|" in numerics.line(beyond)


def test_a_change_declared_exact_passes_only_as_exact():
    rng = random.Random(2)
    ref = side("alone", BASE)
    noise = [moved(BASE, rng, 0.01, "batch of 2"), moved(BASE, rng, 0.01, "batch of 4")]
    v = numerics.judge(
        ref, noise, moved(BASE, rng, 0.005, "candidate"), texts_equal=False, declared_exact=True
    )
    assert v.verdict == "within" and not v.passed and "declared itself exact" in numerics.line(v)


def test_the_stated_false_reject_rate_holds_for_a_candidate_that_moves_as_far_as_the_engine():
    """A candidate whose typical move on each prompt is the engine's own there, times a log-normal
    spread (the t-test's null at margin 1), is refused at the stated rate, and one twice as far is
    refused nearly always."""
    rng = random.Random(3)
    ref = side("alone", BASE)
    rejected, caught, runs = 0, 0, 400
    for _ in range(runs):
        own = [rng.uniform(0.005, 0.05) for _ in BASE]
        engine = side(  # a schedule's side: the precision reference is a yardstick of its own (below)
            "batch of 8", [[lp + d for lp in row] for d, row in zip(own, BASE, strict=True)]
        )
        at = [d * math.exp(rng.gauss(0, 0.3)) for d in own]
        same = side("candidate", [[lp - d for lp in row] for d, row in zip(at, BASE, strict=True)])
        twice = side("candidate", [[lp - 2 * d for lp in row] for d, row in zip(at, BASE, strict=True)])
        rejected += numerics.judge(ref, [engine], same, texts_equal=False).verdict == "beyond"
        caught += numerics.judge(ref, [engine], twice, texts_equal=False).verdict == "beyond"
    a = numerics.ALPHA
    assert rejected / runs <= a + 3 * math.sqrt(a * (1 - a) / runs) + 0.005
    assert caught / runs >= 0.9


def test_a_deterministic_engine_is_judged_against_its_logits_rounding():
    ref = side("alone", BASE)
    same = side("batch of 2", BASE)
    engine = [same, side("batch of 4", BASE), side("warm prefix cache", BASE)]
    moved_one = side("candidate", [[lp + (0.05 if i < 6 else 0) for lp in row] for i, row in enumerate(BASE)])
    assert (
        numerics.judge(
            ref, [same], same.model_copy(update={"schedule": "candidate"}), texts_equal=False
        ).verdict
        == "within"
    )
    assert numerics.rounding(ref) == pytest.approx(1 / 256)
    v = numerics.judge(ref, engine, moved_one, texts_equal=False)
    assert v.verdict == "beyond" and "rounding" in v.engine_schedule
    one_ulp = side("candidate", [[lp + 1 / 256 for lp in row] for row in BASE])
    assert numerics.judge(ref, engine, one_ulp, texts_equal=False).verdict == "within"


def test_a_bug_that_moves_only_the_long_prompts_is_refused_by_the_gross_rule():
    rng = random.Random(4)
    ref = side("alone", BASE)
    noise = [moved(BASE, rng, 0.01, f"batch of {n}") for n in (2, 4, 8)]
    cut = side("candidate", [[lp - (0.5 if i == 7 else 0) for lp in row] for i, row in enumerate(BASE)])
    v = numerics.judge(ref, noise, cut, texts_equal=False)
    assert v.verdict == "beyond" and v.gross == 1 and v.ratio_low < 1


def test_a_token_the_candidate_does_not_list_is_a_move_of_at_least_its_floor():
    ref = side("alone", [[-0.1]])
    gone = ForcedScores(
        schedule="candidate",
        texts=[
            ForcedText(
                prompt="p0",
                continuation="a",
                tokens=[ForcedToken(token="a", logprob=None, rank=0, top={"b": -0.05, "c": -3.0})],
            )
        ],
    )
    assert numerics.moves(ref.texts[0], gone.texts[0]) == [pytest.approx(2.9)]
    assert numerics.flips(gone) == 1


def test_too_few_prompts_are_judged_on_the_typical_move_alone_and_say_so():
    ref = side("alone", BASE[:2])
    v = numerics.judge(
        ref,
        [side("batch of 2", BASE[:2])],
        side("candidate", [[lp - 0.01 for lp in row] for row in BASE[:2]]),
        texts_equal=False,
    )
    assert v.verdict == "beyond" and "too few prompts" in v.note and v.ratio == v.ratio_low
    assert "too few prompts" in numerics.line(v)


def test_sides_on_different_prompt_sets_are_an_error():
    with pytest.raises(ValueError, match="different sets of prompts"):
        numerics.judge(side("alone", BASE), [side("b", BASE[:3])], side("c", BASE), texts_equal=False)
    with pytest.raises(ValueError, match="noise was not measured"):
        numerics.judge(side("alone", BASE), [], side("c", BASE), texts_equal=False)


def _math_and_baseline(rng: random.Random, rounding: float) -> tuple[list[list[float]], ForcedScores]:
    """The model's float32 math (exact logprobs) and a baseline that rounds it by `rounding`."""
    exact = [[-0.1 - 0.05 * j + rng.gauss(0, 0.3) for j in range(12)] for _ in range(16)]
    return exact, side("alone", [[lp + rng.gauss(0, rounding) for lp in row] for row in exact])


def test_beside_a_precision_reference_a_more_precise_change_is_within_and_a_bug_beyond():
    """The float32 attention vs the 10% scale bug of the issue: both move the baseline's tokens
    further than the engine's own schedules (which barely move them), but the precise change lands
    nearer the float32 math than the baseline and the bug further."""
    rng = random.Random(5)
    exact, ref = _math_and_baseline(rng, 0.05)
    noise = [moved(exact, rng, 0.001, "batch of 2"), side(numerics.PRECISE, exact)]
    precise = side("candidate", [[lp + rng.gauss(0, 0.01) for lp in row] for row in exact])
    rerounded = side("candidate", [[lp + rng.gauss(0, 0.05) for lp in row] for row in exact])
    bug = side("candidate", [[lp * 1.1 + rng.gauss(0, 0.05) for lp in row] for row in exact])
    for cand, want in [(precise, "within"), (rerounded, "within"), (bug, "beyond")]:
        v = numerics.judge(ref, noise, cand, texts_equal=False)
        assert v.yardstick == "precise" and v.verdict == want, numerics.line(v)
    v = numerics.judge(ref, noise, precise, texts_equal=False)
    assert v.precise_dlogprob < v.baseline_precise_dlogprob and v.ratio < 1
    assert "distance from the float32 math" in numerics.line(v)
    bug_v = numerics.judge(ref, noise, bug, texts_equal=False)
    assert bug_v.ratio_low > 1 and bug_v.precise_dlogprob > bug_v.baseline_precise_dlogprob


def test_the_stated_false_reject_rate_holds_beside_a_precision_reference():
    """A change of rounding exactly as coarse as the baseline's is refused at the stated rate."""
    rng = random.Random(6)
    rejected, runs = 0, 300
    for _ in range(runs):
        exact, ref = _math_and_baseline(rng, 0.05)
        noise = [side("batch of 2", [[t.logprob or 0.0 for t in x.tokens] for x in ref.texts])]
        noise.append(side(numerics.PRECISE, exact))
        cand = side("candidate", [[lp + rng.gauss(0, 0.05) for lp in row] for row in exact])
        rejected += numerics.judge(ref, noise, cand, texts_equal=False).verdict == "beyond"
    assert rejected / runs <= 0.04, rejected


def test_sessions_recorded_before_the_math_distance_keep_the_engines_yardstick():
    rng = random.Random(7)
    exact, ref = _math_and_baseline(rng, 0.05)
    noise = [moved(exact, rng, 0.001, "batch of 2"), side(numerics.PRECISE, exact)]
    cand = side("candidate", [[lp + rng.gauss(0, 0.01) for lp in row] for row in exact])
    old = numerics.judge(ref, noise, cand, texts_equal=False, math_distance=False)
    new = numerics.judge(ref, noise, cand, texts_equal=False)
    assert old.yardstick == "engine" and new.yardstick == "precise" and old.ratio != new.ratio
    few = numerics.judge(
        ForcedScores(schedule="alone", texts=ref.texts[:3]),
        [ForcedScores(schedule=s.schedule, texts=s.texts[:3]) for s in noise],
        ForcedScores(schedule="candidate", texts=cand.texts[:3]),
        texts_equal=False,
    )
    assert few.yardstick == "engine" and few.note  # too few prompts for the interval


def test_a_baseline_already_computing_the_float32_math_is_judged_by_the_engines_moves():
    """A server launched in float32 already: the precision reference scores what the baseline does,
    so it is no yardstick of rounding (every ratio would divide by zero); the engine's moves judge."""
    rng = random.Random(8)
    exact, _ = _math_and_baseline(rng, 0.05)
    ref = side("alone", exact)
    noise = [moved(exact, rng, 0.01, "batch of 2"), side(numerics.PRECISE, exact)]
    v = numerics.judge(ref, noise, moved(exact, rng, 0.005, "candidate"), texts_equal=False)
    assert v.yardstick == "engine" and v.verdict == "within", numerics.line(v)


def test_a_prompt_no_schedule_moved_is_held_to_one_unit_of_rounding_not_zero():
    """A GPU batch moves some prompts and leaves others bit-identical: a candidate one ulp off on
    those was refused at ~10^5 times the engine's move (an H100 chain); held to one unit of the
    logits' rounding (1/256 here) it is within, a real error is still beyond, and recorded sessions
    (`unit_floor=False`) keep the old verdict."""
    rng = random.Random(5)
    ref = side("alone", BASE)
    some = [[lp + (rng.gauss(0, 0.01) if i < 2 else 0.0) for lp in row] for i, row in enumerate(BASE)]
    noise = [side("batch of 6", some)]
    ulp = side("candidate", [[lp + 0.5 / 256 for lp in row] for row in BASE])  # half a unit, everywhere
    v = numerics.judge(ref, noise, ulp, texts_equal=False)
    assert v.verdict == "within" and v.ratio < 1, numerics.line(v)
    old = numerics.judge(ref, noise, ulp, texts_equal=False, unit_floor=False)
    assert old.verdict == "beyond" and old.ratio > 1e3, numerics.line(old)
    bug = numerics.judge(ref, noise, moved(BASE, rng, 0.1, "candidate"), texts_equal=False)
    assert bug.verdict == "beyond" and bug.ratio_low > 1, numerics.line(bug)
