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
    assert "┏" not in text and "evidence: the profile's diagnosis above" in text  # no empty table
    assert (
        "  proposed: vllm serve m --port '{port}' --enforce-eager --max-num-seqs 1 --max-num-seqs 8" in text
    )


def test_show_diff_prints_a_launch_proposal_instead_of_failing(tmp_path: Path) -> None:
    text = diff_or_launch(states(tmp_path), None)
    assert text.splitlines()[:2] == [
        "# proposal 1 (search-1) changes launch options, not code",
        "launch options: --max-num-seqs 1 -> 8",
    ], text
    assert diff_or_launch(states(tmp_path), 1) == text
