"""A launch-option proposal shown as what it is, at approval and by `perfloop show --diff`: the flag
change before -> after, the predicted bound, the evidence that implicated it; no "expected gain: 0%"
beside the bound, no empty evidence table, no blank "patch changes:", and no "launch command:" /
"runs now:" pair that does not say which one is proposed. `show last --diff` (the README's review
step) once failed with exit 2 on such a proposal."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from agent.cli import render
from agent.cli.commands.show import diff_or_launch
from agent.cli.target import load_target
from agent.report.headline import flag_change
from agent.steps.approval import approval_request
from state.engines.vllm import DecodePhases
from state.profiling.diagnosis import Diagnosis
from state.profiling.profile import OpStat
from state.sessions.loop import LoopOptions, LoopState, Proposal
from tests.unit.test_target import DEMO_TOML

BEFORE = ["vllm", "serve", "m", "--port", "{port}", "--enforce-eager", "--max-num-seqs", "1"]
AFTER = [*BEFORE, "--max-num-seqs", "8"]  # the search appends its knob: the last one wins


def states(tmp_path: Path) -> list[LoopState]:
    target = load_target(DEMO_TOML)
    target = target.model_copy(update={"launch": target.launch.model_copy(update={"argv": BEFORE})})
    base = LoopState(
        session_id="s",
        target=target,
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1", approve="manual"),
    )
    proposal = Proposal(
        iteration=1, source="search-1", title="search trial 1: --max-num-seqs 8",
        explanation="host-bound decode over 5 steps implicates --max-num-seqs", diff="", files=[],
        expected_gain_share=0.0, expected_gain_ms=None, evidence=[], launch_argv=AFTER, predicted_speedup=8.0,
    )  # fmt: skip
    return [base, base.model_copy(update={"proposal": proposal})]


def test_flag_change_reads_before_and_after() -> None:
    assert flag_change(BEFORE, AFTER) == "--max-num-seqs 1 -> 8"
    assert (
        flag_change(["a", "--x=1", "--y"], ["a", "--x=2", "--z", "3"])
        == "--x 1 -> 2; --z (added) 3; --y removed"
    )
    assert flag_change(BEFORE, BEFORE) == "no launch flag changed"


def test_the_approval_shows_the_flag_change_the_bound_and_the_evidence(tmp_path: Path) -> None:
    req = approval_request(states(tmp_path)[-1])
    out = io.StringIO()
    render.approval(Console(file=out, width=100, color_system=None), req)
    text = out.getvalue()
    assert "launch options: --max-num-seqs 1 -> 8" in text and "predicted: at most 8.00x" in text, text
    assert "implicates --max-num-seqs" in text  # the evidence that implicated it: the diagnosis
    assert "expected gain: 0%" not in text and "patch changes:" not in text and "runs now" not in text, text
    assert "┏" not in text and "evidence: none recorded (no profile diagnosed it)" in text  # no empty table
    assert "diagnosis above" not in text  # issue 57: it pointed at a diagnosis never shown
    assert (
        "  proposed: vllm serve m --port '{port}' --enforce-eager --max-num-seqs 1 --max-num-seqs 8" in text
    )


def test_a_proposal_without_evidence_of_its_own_shows_the_last_diagnosis(tmp_path: Path) -> None:
    """Issue 57: "evidence: the profile's diagnosis above" with nothing above. The diagnosis the
    view points at is printed under it: vLLM's decode phases, the heaviest ops, the findings."""
    phases = DecodePhases(
        steps=5, step_ms=2.0, phase_ms={"preprocess": 0.9, "forward": 0.6}, host_ms=1.4, forward_ms=0.6,
        host_bound=True,
    )  # fmt: skip
    op = OpStat(name="aten::mm", calls=10, self_us=500.0, total_us=600.0, share=0.42)
    diag = Diagnosis(findings=[], top_ops=[op], time_basis="cpu", steps=5, decode_phases=phases)
    state = states(tmp_path)[-1].model_copy(update={"diagnosis": diag})
    out = io.StringIO()
    render.approval(Console(file=out, width=100, color_system=None), approval_request(state))
    lines = out.getvalue().splitlines()
    at = lines.index("evidence: the last profile's diagnosis")
    assert lines[at + 1] == "  " + phases.line()
    assert lines[at + 2 : at + 4] == ["  heaviest ops (CPU time): aten::mm 42%", "  findings: none"]


def test_show_diff_prints_a_launch_proposal_instead_of_failing(tmp_path: Path) -> None:
    text = diff_or_launch(states(tmp_path), None)
    assert text.splitlines()[:2] == [
        "# proposal 1 (search-1) changes launch options, not code",
        "launch options: --max-num-seqs 1 -> 8",
    ], text
    assert diff_or_launch(states(tmp_path), 1) == text
