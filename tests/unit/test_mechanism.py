"""The mechanism check: did the op a diagnosis blamed shrink after its patch was accepted?"""

from __future__ import annotations

from agent.decision.stats.mechanism import check, predict
from state.diagnosis import Diagnosis, Evidence
from state.loop import Proposal
from state.profile import OpStat, ProfileSummary

DIMS = [[24576, 1, 576], [24576, 1, 576], []]


def profile(cast_us: float, other_us: float = 100.0, steps: int = 5) -> ProfileSummary:
    ops = [OpStat(name="aten::mm", calls=5, self_us=other_us, total_us=other_us, share=0.0)]
    if cast_us:
        ops.append(
            OpStat(
                name="aten::copy_", calls=20, self_us=cast_us, total_us=cast_us, share=0.0, input_dims=DIMS
            )
        )
    total = cast_us + other_us
    return ProfileSummary(
        source="t", time_basis="cpu", steps=steps, total_self_us=total, step_us=total / steps, ops=ops
    )


def proposal() -> Proposal:
    ev = Evidence(op="aten::copy_", dims=DIMS, self_us=900.0, share=0.9, calls=20, note="n")
    return Proposal(
        iteration=1, source="kv", title="t", explanation="e", diff="", files=[],
        expected_gain_share=0.85, expected_gain_ms=None, evidence=[ev],
    )  # fmt: skip


def test_a_cast_that_vanished_confirms_the_mechanism() -> None:
    diag = Diagnosis(findings=[], top_ops=[], time_basis="cpu", steps=5, step_us=200.0)
    p = predict(proposal(), diag)
    assert p is not None and p.op_us_per_step == 180.0 and p.step_us == 200.0
    c = check(1, "kv", p, profile(0.0))
    assert c.confirmed and c.op_us_per_step_after == 0.0 and c.predicted_removed_us == 170.0
    assert "mechanism confirmed" in c.note


def test_a_gain_whose_op_did_not_shrink_is_flagged() -> None:
    diag = Diagnosis(findings=[], top_ops=[], time_basis="cpu", steps=5, step_us=200.0)
    p = predict(proposal(), diag)
    assert p is not None
    c = check(1, "kv", p, profile(880.0))
    assert not c.confirmed and "GAIN WITHOUT MECHANISM" in c.note


def test_no_prediction_without_the_step_count() -> None:
    assert predict(proposal(), Diagnosis(findings=[], top_ops=[], time_basis="cpu")) is None
