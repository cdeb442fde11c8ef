"""What the first message tells the model: output policy, per-step times, repo-relative call
sites, evidence notes, skipped playbooks, a stored patch to port (pure, from a state)."""

from __future__ import annotations

from pathlib import Path

from agent.proposer.briefing.evidence import context, port_patch
from playbooks.engine import load_playbooks
from state.measurement.correctness import CorrectnessConfig
from state.sessions.loop import Decision
from tests.llm.conftest import BACKEND, loop_state

BOOK = "kv-cache-full-pool-cast"


def test_the_context_carries_the_evidence_a_performance_engineer_wants(tmp_path: Path, engine: Path) -> None:
    state = loop_state(tmp_path, engine, "http://127.0.0.1:9/v1")
    d = state.diagnosis
    assert d is not None
    diag = d.model_copy(update={"steps": 40, "step_us": 16_000.0})
    state = state.model_copy(update={"diagnosis": diag})
    text = context(state, {}, skipped=[f"{BOOK} (no sglang patch for 0.5.14)"])
    assert "Output policy (exact): the server's greedy outputs must stay bit-identical" in text
    assert "15.000 ms per step" in text and "One profiled decode step takes 16.00 ms" in text
    assert f"called from {BACKEND}:26 (forward_decode)" in text and str(engine) not in text
    assert "    evidence: n" in text  # the finding's evidence note
    assert f"{BOOK} (no sglang patch for 0.5.14)" in text

    gate = CorrectnessConfig(policy="tolerance", min_top1_agreement=0.95, max_logprob_diff=0.1)
    tolerant = state.model_copy(update={"target": state.target.model_copy(update={"correctness": gate})})
    assert "top-1 token must agree on at least 95.0% of positions" in context(tolerant, {})
    assert "bit-identical" not in context(tolerant, {})


def test_a_matching_playbook_whose_patch_failed_to_apply_is_given_to_port(
    tmp_path: Path, engine: Path
) -> None:
    state = loop_state(tmp_path, engine, "http://127.0.0.1:9/v1")
    d = state.diagnosis
    assert d is not None
    finding = d.findings[0].model_copy(update={"playbook": BOOK})
    failed = Decision(iteration=1, source=BOOK, verdict="failed", reason="patch does not apply: hunk 1")
    state = state.model_copy(
        update={"diagnosis": d.model_copy(update={"findings": [finding]}), "decisions": [failed]}
    )
    port = port_patch(state, load_playbooks())
    assert port is not None and port[0] == BOOK and port[1] == "patch does not apply: hunk 1"
    assert port[2].startswith("diff --git") or "--- a/" in port[2]
    text = context(state, {}, port=port)
    assert f"Playbook {BOOK} matched this profile, but its stored patch does not fit" in text
    assert '<data kind="patch-to-port">' in text
    assert port_patch(state.model_copy(update={"decisions": []}), load_playbooks()) is None


def test_under_cuda_graphs_the_kernels_are_listed(tmp_path: Path, engine: Path) -> None:
    from state.profiling.profile import KernelStat

    state = loop_state(tmp_path, engine, "http://127.0.0.1:9/v1")
    d = state.diagnosis
    assert d is not None
    assert "CUDA graphs" not in context(state, {})
    kern = KernelStat(name="fused_moe_kernel", calls=80, device_us=8000.0, share=0.6, graph_calls=80)
    state = state.model_copy(update={"diagnosis": d.model_copy(update={"kernels": [kern], "steps": 40})})
    text = context(state, {})
    assert "Decode runs in CUDA graphs; the heaviest kernels inside them:" in text
    assert (
        "1. fused_moe_kernel: 60.0% of kernel time, 80 calls (80 inside CUDA graphs), 0.200 ms per step"
        in text
    )


def test_kept_patches_come_with_their_mechanism_check(tmp_path: Path, engine: Path) -> None:
    from state.measurement.decision import MechanismCheck

    state = loop_state(tmp_path, engine, "http://127.0.0.1:9/v1")
    kept = Decision(iteration=1, source="llm", verdict="accepted", reason="TPOT 3.10x [2.9, 3.3]")
    check = MechanismCheck(
        iteration=1,
        playbook="llm",
        op="aten::copy_",
        op_us_per_step_before=412.0,
        op_us_per_step_after=0.0,
        predicted_removed_us=380.1,
        step_us_before=500.0,
        step_us_after=90.0,
        confirmed=True,
        note="aten::copy_ 0.412 -> 0.000 ms/step (predicted -0.380); step 0.500 -> 0.090 ms: mechanism confirmed",
    )
    text = context(state.model_copy(update={"decisions": [kept], "mechanisms": [check], "iteration": 2}), {})
    assert (
        "- llm (iteration 1): TPOT 3.10x [2.9, 3.3]\n  mechanism check: aten::copy_ 0.412 -> 0.000 ms/step"
        in text
    )


def test_the_answer_asked_for_follows_the_targets_launch_options(tmp_path: Path, engine: Path) -> None:
    """Edit blocks without launch options; edit blocks or LAUNCH lines with them; LAUNCH lines
    only where every file is protected (the code is off limits)."""
    state = loop_state(tmp_path, engine, "http://127.0.0.1:9/v1")
    asked = {}
    for name, update in (
        ("code", {}),
        ("both", {"launch_options": True}),
        ("launch", {"launch_options": True, "protected": ["*"]}),
        ("code-protected", {"protected": ["*"]}),  # no launch options: nothing else to ask for
    ):
        cfg = state.target.proposer.model_copy(update=update)
        given = state.model_copy(update={"target": state.target.model_copy(update={"proposer": cfg})})
        asked[name] = context(given, {}).split("\n\n")[-1]
    assert (
        asked["code"]
        == asked["code-protected"]
        == ("Read what you need, then answer with your rationale and edit blocks.")
    )
    assert asked["both"].endswith("either edit blocks (a code fix) or LAUNCH: lines (a launch-option fix).")
    assert asked["launch"] == (
        "The code is off limits here (every file is protected): read what you need, then answer "
        "with your rationale and LAUNCH: lines."
    )
