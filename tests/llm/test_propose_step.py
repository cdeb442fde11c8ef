"""The propose step's choice between playbooks and the model (`--proposer playbook|llm|auto`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.steps_propose import propose
from state.proposer import ProposerConfig
from tests.llm.conftest import fix_answer, loop_state, runtime
from tests.llm.fake_openai import ScriptedModel, reply
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor

pytestmark = pytest.mark.timeout(60)


def run_propose(tmp_path: Path, engine: Path, script, **proposer):
    with ScriptedModel(script) as model:
        state = loop_state(tmp_path, engine, model.base_url)
        cfg = state.target.proposer.model_copy(update=proposer)
        state = state.model_copy(update={"target": state.target.model_copy(update={"proposer": cfg})})
        cmd = propose(state, runtime(LiveDoor("s", MemoryRecorder())))
    return cmd, model


def test_auto_asks_the_model_when_no_playbook_fits(tmp_path: Path, engine: Path) -> None:
    cmd, model = run_propose(tmp_path, engine, [reply(fix_answer())], mode="auto")
    assert cmd.goto == "approve" and len(model.requests) == 1
    p = cmd.update["proposal"]
    assert p.proposer == "llm" and cmd.update["llm_usage"].calls == 1
    assert "model scripted-coder" in cmd.update["transitions"][0].note


def test_playbook_mode_never_asks_a_model(tmp_path: Path, engine: Path) -> None:
    cmd, model = run_propose(tmp_path, engine, [], mode="playbook")
    assert cmd.goto == "finish" and model.requests == []
    assert cmd.update["stop_reason"].endswith("--proposer playbook: no model is asked")


def test_auto_without_a_model_stops_as_before(tmp_path: Path, engine: Path) -> None:
    cmd, model = run_propose(tmp_path, engine, [], mode="auto", model=None)
    assert cmd.goto == "finish" and model.requests == []
    assert (
        cmd.update["stop_reason"]
        == "no untried playbook matches the profile; top: aten::copy_ takes 80% of cpu time"
    )


def test_a_dropped_model_proposal_is_a_failed_decision_and_propose_runs_again(
    tmp_path: Path, engine: Path
) -> None:
    cmd, _ = run_propose(tmp_path, engine, [reply("no edits, sorry")] * 4, mode="llm")
    assert cmd.goto == "propose"
    (decision,) = cmd.update["decisions"]
    assert decision.playbook == "llm" and decision.verdict == "failed"
    assert decision.reason.startswith("model proposal dropped: no valid patch after 3 repair round(s): parse")
    assert ProposerConfig().max_proposals == 1


def test_cli_refuses_llm_without_a_model_in_one_line(tmp_path: Path) -> None:
    from tests.e2e.conftest import perfloop

    proc = perfloop(tmp_path / "home", "demo", "--proposer", "llm", "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "error: --proposer llm needs a model: pass --model NAME (or set model under [proposer])"
    )
