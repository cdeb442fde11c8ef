"""Pure parts of measuring for the CI rule: merging looks, the output gate, like against like."""

from __future__ import annotations

from agent.decision.arms.measuring import content_fingerprint, merge, outputs_problem, unlike
from agent.sessions.summary import summarize as summarize_session
from state.measurement.decision import Judgement, LaunchNoise, Look
from state.measurement.measure import RequestRecord
from tools.client.stats import summarize


def m(texts: list[str], tpot: float = 10.0, reps: int = 2, **extra):
    records = [
        RequestRecord(prompt_index=i, ttft_ms=5.0, itl_ms=[tpot] * 3, text=t, completion_tokens=4)
        for _ in range(reps)
        for i, t in enumerate(texts)
    ]
    return summarize("x", "tree", records, len(texts), wall_s=1.0).model_copy(update=extra)


def test_merge_keeps_every_request_and_what_the_tree_held() -> None:
    a = m(["a", "b"], 10.0, warmups_discarded=1, instrumented=True, content_sha256="c", tree_note="HEAD x")
    b = m(["a", "b"], 20.0)
    both = merge(a, b)
    assert len(both.requests) == 8 and both.tpot_ms.n == 8
    assert (both.warmups_discarded, both.instrumented, both.content_sha256, both.tree_note) == (
        1,
        True,
        "c",
        "HEAD x",
    )
    assert both.output_tok_per_s == 32 / 2.0  # 16 tokens in 1 s, twice


def test_output_gate_and_unlike_arms() -> None:
    ref = m(["a", "b"])
    assert outputs_problem(ref, m(["a", "b"])) is None
    assert outputs_problem(ref, m(["a", "X"])) == "outputs changed for 1/2 prompt(s)"
    assert unlike(m(["a"], instrumented=True), m(["a"], instrumented=False)) is not None
    assert unlike(m(["a"], instrumented=True), m(["a"], instrumented=None)) is None  # not recorded
    assert unlike(m(["a"]), m(["a"], client="sglang.bench_serving")) is not None


def test_content_fingerprint_ignores_the_commit_but_not_the_content() -> None:
    a = content_fingerprint("tree1", "commitA", {"f.py": "h1"})
    assert a == content_fingerprint("tree1", "commitB", {"f.py": "h1"})
    assert a != content_fingerprint("tree1", "commitA", {"f.py": "h2"})
    assert a != content_fingerprint("tree2", "commitA", {"f.py": "h1"})


def test_the_summary_reports_the_decisive_candidate(tmp_path) -> None:
    from agent.cli.target import load_target
    from state.sessions.loop import Decision, LoopOptions, LoopState
    from tests.unit.test_target import DEMO_TOML

    lk = Look(
        look=1, of=3, speedup=3.1, ci_low=2.2, ci_high=4.4, level=0.983, prompts=3,
        requests_reference=9, requests_candidate=3, verdict="accepted",
    )  # fmt: skip
    j = Judgement(
        verdict="accepted",
        looks=[lk],
        launch_noise=LaunchNoise(sigma_log=0.15),
        min_gain=0.02,
        confidence=0.95,
    )
    state = LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        baseline=m(["a"], 30.0),
        reference=m(["a"], 10.0),
        decisions=[
            Decision(iteration=1, source="p", verdict="accepted", reason="r", judgement=j),
            Decision(iteration=2, source="q", verdict="failed", reason="crashed"),
        ],
    )
    s = summarize_session(state, "done")
    assert s.verdict == "accepted" and s.speedup_ci == [2.2, 4.4] and s.requests_per_arm == 3
    assert s.decision is not None
    assert s.launch_noise == 0.15 and s.decision.startswith("TPOT 3.10x [2.20, 4.40] 95% CI")
    assert "launch noise 15.0% (the conservative default; none yet), look 1/3 -> accepted" in s.decision


def test_machine_drift_is_the_ratio_of_the_arms_cpu_probes() -> None:
    from agent.decision.arms.measuring import machine_drift

    assert machine_drift(m(["a"], probe_ms=[10.0, 12.0]), m(["a"], probe_ms=[22.0])) == 2.0
    assert machine_drift(m(["a"], probe_ms=[22.0]), m(["a"], probe_ms=[10.0, 12.0])) == 2.0
    assert machine_drift(m(["a"]), m(["a"], probe_ms=[5.0])) == 1.0  # not recorded (older sessions)
    assert merge(m(["a"], probe_ms=[1.0]), m(["a"], probe_ms=[2.0])).probe_ms == [1.0, 2.0]
