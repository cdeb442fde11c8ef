"""The engines' exact compile path as a launch option the search tries: `--enable-torch-compile` is
a flag a search may change for the demo and SGLang, the glm5 targets search it, and a finding of
many small kernels (decode-step-fusion) puts it in the first trial."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.proposer.tuning.search import search_proposal
from playbooks.flags import changeable
from state.config.options import LoopOptions
from state.profiling.diagnosis import Diagnosis, Finding
from state.sessions.loop import LoopState

TARGETS = Path(__file__).resolve().parents[2] / "examples" / "targets"


def test_the_compile_flags_are_changeable_for_the_demo_and_sglang() -> None:
    for kind in ("mla_server", "sglang"):
        assert {"--enable-torch-compile", "--torch-compile-max-bs"} <= set(changeable(kind)), kind


def glm5_state(tmp_path: Path, name: str, finding: str | None) -> LoopState:
    findings = (
        [
            Finding(
                playbook=finding,
                title=finding,
                confidence=0.4,
                expected_gain_share=0.3,
                expected_gain_ms=None,
                explanation="",
                evidence=[],
            )
        ]
        if finding
        else []
    )
    return LoopState(
        session_id="s1",
        target=load_target(TARGETS / name),
        options=LoopOptions(session_dir=tmp_path, python="python3"),
        diagnosis=Diagnosis(findings=findings, top_ops=[], time_basis="device"),
        decisions=[],
    )


@pytest.mark.parametrize("name", ["mla_server_glm5.toml", "mla_server_glm5_serving.toml"])
def test_many_small_kernels_put_the_compile_path_in_the_first_trial(tmp_path: Path, name: str) -> None:
    proposal, what = search_proposal(glm5_state(tmp_path, name, "decode-step-fusion"))
    assert proposal is not None and proposal.launch_argv is not None and proposal.diff == ""
    assert proposal.launch_argv.count("--enable-torch-compile") == 1
    assert "--enable-torch-compile" in what and "implicates" in proposal.explanation


def test_a_cast_finding_does_not_implicate_the_compile_path(tmp_path: Path) -> None:
    proposal, _ = search_proposal(glm5_state(tmp_path, "mla_server_glm5.toml", "kv-cache-full-pool-cast"))
    assert proposal is not None and "implicates" not in proposal.explanation


def test_the_fusion_patch_is_not_proposed_where_the_launch_compiles_already() -> None:
    from playbooks.engine import launch_conflict, load_playbooks

    fusion = next(b for b in load_playbooks() if b.id == "decode-step-fusion")
    argv = ["bash", "launch.sh", "--port", "{port}", "--preset", "glm5", "--device", "cuda"]
    assert launch_conflict(fusion, "mla_server", argv) is None
    reason = launch_conflict(fusion, "mla_server", [*argv, "--enable-torch-compile"])
    assert reason is not None and "--enable-torch-compile" in reason
