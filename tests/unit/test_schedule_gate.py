"""The schedule-aware output gate (agent/decision/gate/schedule.py): the math judged where the
schedule is controlled, batched texts against the baseline's own variation."""

from agent.decision.arms.measuring import outputs_problem, texts_compared
from agent.decision.gate.schedule import divergence, fisher_greater, judge, moved, noise_of, repeats_moved
from state.measurement.correctness import OutputsResult
from state.measurement.measure import Measurement, RequestRecord, Stat, Window

NAMED = ["timing prompt 1", "timing prompt 2", "random prompt 1", "random prompt 2"]
ALONE = ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
BATCH = [0, 1, 2, 3]


def result(alone: list[str], at_once: list[str], staggered: list[str]) -> OutputsResult:
    return OutputsResult(sequential=alone, concurrent=at_once, staggered=staggered, duration_s=1.0)


def test_divergence_and_moved_count_characters() -> None:
    assert divergence("abc", "abc") is None
    assert divergence("abcd", "abXd") == 2
    assert divergence("abc", "ab") == 2
    k, first, agreement = moved(ALONE, [(0, "alpha beta"), (1, "gamma dXXta")])
    assert (k, first) == (1, 7)
    assert 0.5 < agreement < 1.0


def test_fisher_one_sided_is_the_hypergeometric_tail() -> None:
    assert fisher_greater(0, 8, 0, 8) == 1.0
    # all 8 of the candidate's moved against none of the baseline's 8: 1 / C(16, 8)
    assert abs(fisher_greater(8, 8, 0, 8) - 1 / 12870) < 1e-12
    # as often as the baseline: far from any rejection
    assert fisher_greater(1, 8, 1, 8) > 0.5


def test_a_batch_invariant_launch_whose_baseline_never_moved_keeps_the_exact_rule() -> None:
    ref = result(ALONE, ALONE, ALONE)
    noise = noise_of(ref, BATCH, mode="--enable-deterministic-inference")
    assert noise.exact and noise.varied == 0 and noise.observations == 8
    assert "(--enable-deterministic-inference)" in noise.line()
    same = judge(noise, ref, result(ALONE, ALONE, ALONE), BATCH, NAMED)
    assert same[0] is None and "identical alone and in the batch" in same[1]
    one_moved = result(ALONE, [ALONE[0], "gamma dXXta", *ALONE[2:]], ALONE)
    problem, line = judge(noise, ref, one_moved, BATCH, NAMED)
    assert problem is not None and "timing prompt 2" in problem and line == problem


def test_a_baseline_that_did_not_move_without_such_a_mode_is_no_proof_of_a_rate_of_zero() -> None:
    # 0 of 8 is what a rate of a few percent shows most of the time: one moved text of the faster
    # candidate's is within it; a batch path that moves every text is not
    ref = result(ALONE, ALONE, ALONE)
    noise = noise_of(ref, BATCH)
    assert not noise.exact and "no batch-invariant mode" in noise.line()
    one_moved = result(ALONE, [ALONE[0], "gamma dXXta", *ALONE[2:]], ALONE)
    problem, line = judge(noise, ref, one_moved, BATCH, NAMED)
    assert problem is None and "1/8 texts moved" in line and "baseline's own 0/8" in line
    broken = [t[:3] + "!!!!!" for t in ALONE]
    problem, _ = judge(noise, ref, result(ALONE, broken, broken), BATCH, NAMED)
    assert problem is not None and "8/8" in problem


def test_texts_alone_are_the_math_whatever_the_batch_did() -> None:
    moved_ref = result(ALONE, [ALONE[0], "gamma dXXta", *ALONE[2:]], ALONE)
    noise = noise_of(moved_ref, BATCH)
    assert not noise.exact and noise.varied == 1
    wrong = result([ALONE[0], ALONE[1], "epsilon WRONG", ALONE[3]], ALONE, ALONE)
    problem, _ = judge(noise, moved_ref, wrong, BATCH, NAMED)
    assert problem is not None and "1/4 alone (random prompt 1)" in problem and "math changed" in problem


def test_batched_texts_within_the_baselines_share_pass_and_say_so() -> None:
    # the H100 case: the baseline's batch moved one prompt; the faster candidate's batch moved
    # another one (a schedule the baseline did not have); alone every text is identical
    ref = result(ALONE, [ALONE[0], "gamma dXXta", *ALONE[2:]], [*ALONE[:3], "eta thYYa"])
    noise = noise_of(ref, BATCH)
    cand = result(ALONE, [*ALONE[:2], "epsilon zZZa", ALONE[3]], ALONE)
    problem, line = judge(noise, ref, cand, BATCH, NAMED)
    assert problem is None
    assert "1/8 texts moved with the schedule" in line and "baseline's own 2/8" in line
    assert "within the baseline's schedule noise" in line


def test_a_candidate_whose_batch_moves_far_more_than_the_baselines_is_rejected() -> None:
    ref = result(ALONE, [ALONE[0], "gamma dXXta", *ALONE[2:]], ALONE)  # 1/8 moved
    noise = noise_of(ref, BATCH)
    broken = [t[:3] + "!!!!!" for t in ALONE]  # a batch path that is wrong: every text
    problem, _ = judge(noise, ref, result(ALONE, broken, broken), BATCH, NAMED)
    assert problem is not None and "more than the baseline's own: 8/8" in problem and "1/8" in problem


def test_repeats_alone_that_differ_move_texts_alone_under_the_same_rule() -> None:
    assert repeats_moved({0: ["a", "a", "b"], 1: ["c", "c"]}) == (3, 1)
    ref = result(ALONE, ALONE, ALONE)
    noise = noise_of(ref, BATCH, repeats=(8, 2))
    assert not noise.alone_stable and not noise.exact and noise.varied == 2
    cand = result([ALONE[0], "gamma dXXta", *ALONE[2:]], ALONE, ALONE)
    problem, line = judge(noise, ref, cand, BATCH, NAMED)
    assert problem is None and "1/12 texts moved" in line
    assert "repeats alone differ too" in noise.line()


def measurement(texts: list[str], stable: bool, windows: bool) -> Measurement:
    stat = Stat(median=10, p25=9, p75=11, min=8, max=12, n=2)
    return Measurement(
        label="x",
        tree_sha256="t",
        tpot_ms=stat,
        ttft_ms=stat,
        output_tok_per_s=1.0,
        outputs=texts,
        outputs_stable=stable,
        requests=[
            RequestRecord(prompt_index=i, ttft_ms=1, itl_ms=[1], text=t, completion_tokens=2)
            for i, t in enumerate(texts)
        ],
        windows=[Window(index=0, concurrency=8, requests=2, output_tokens=4, wall_s=1.0)] if windows else [],
    )


def test_timing_texts_whose_schedule_follows_the_speed_are_not_compared_text_by_text() -> None:
    served_ref, served_cand = measurement(["a", "b"], False, True), measurement(["a", "X"], False, True)
    # before the schedule gate: the property the baseline itself had rejected every candidate
    assert outputs_problem(served_ref, served_cand) == "outputs changed for 1/2 prompt(s)"
    assert not texts_compared(served_ref, True)
    assert outputs_problem(served_ref, served_cand, schedule_gate=True) is None
    # requests sent alone with stable repeats stay exact under the schedule gate
    alone_ref, alone_cand = measurement(["a", "b"], True, False), measurement(["a", "X"], True, False)
    assert texts_compared(alone_ref, True)
    assert outputs_problem(alone_ref, alone_cand, schedule_gate=True) == "outputs changed for 1/2 prompt(s)"
