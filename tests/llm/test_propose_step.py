"""The propose step's choice between playbooks and the model (`--proposer playbook|llm|auto`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.steps.propose import propose
from state.config.target import TrialHost
from state.proposers.proposer import ProposerConfig
from state.proposers.search import Knob, SearchConfig
from tests.llm.conftest import NEW, fix_answer, loop_state, runtime
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


def test_playbook_mode_never_runs_a_search_trial(tmp_path: Path, engine: Path) -> None:
    """`--proposer playbook` on a target with a `[search]` (the vLLM MLA example once ran one)."""
    knob = Knob(name="--max-running-requests", type="choice", choices=[1, 8])
    with ScriptedModel([]) as model:
        state = loop_state(tmp_path, engine, model.base_url)
        target = state.target.model_copy(
            update={
                "proposer": state.target.proposer.model_copy(update={"mode": "playbook"}),
                "search": SearchConfig(knobs=[knob]),
            }
        )
        cmd = propose(state.model_copy(update={"target": target}), runtime(LiveDoor("s", MemoryRecorder())))
    assert cmd.goto == "finish" and cmd.update.get("proposal") is None, cmd.update
    assert "search" not in cmd.update["stop_reason"], cmd.update["stop_reason"]


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
    assert decision.source == "llm" and decision.verdict == "failed"
    assert decision.reason.startswith("model proposal dropped: no valid patch after 3 repair round(s): parse")
    assert ProposerConfig().max_proposals == 3


def test_cli_refuses_llm_without_a_model_in_one_line(tmp_path: Path) -> None:
    from tests.e2e.conftest import perfloop

    proc = perfloop(tmp_path / "home", "demo", "--proposer", "llm", "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (
        "error: --proposer llm needs a model: pass --model NAME (or set model under [proposer])"
    )
    bad = perfloop(tmp_path / "home", "demo", "--model", "m", "--llm-approve", "sometimes", "--json")
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "error: --llm-approve must be manual or auto, not 'sometimes'"
    )


SLOWER = NEW.replace(
    "kv = k_buffer[kv_indices].to(q.dtype)  # gather the request's rows, then cast only those",
    "kv = k_buffer[kv_indices].to(q.dtype).contiguous()  # a different change",
)


def with_hosts(state, n: int, parallel: int | None = None):
    """The state with `n` local `[[hosts]]` (checkouts are not touched by `propose`)."""
    hosts = [TrialHost(name=f"h{k}", repo=state.target.repo) for k in range(n)]
    target = state.target.model_copy(update={"hosts": hosts})
    return state.model_copy(
        update={"target": target, "options": state.options.model_copy(update={"parallel": parallel})}
    )


def propose_on_hosts(tmp_path: Path, engine: Path, script, n: int = 2, parallel: int | None = None, **cfg):
    with ScriptedModel(script) as model:
        state = with_hosts(loop_state(tmp_path, engine, model.base_url, **cfg), n, parallel)
        cmd = propose(state, runtime(LiveDoor("s", MemoryRecorder())))
    return cmd, model


def test_two_hosts_ask_the_model_for_two_different_candidates_and_fan_them_out(
    tmp_path: Path, engine: Path
) -> None:
    cmd, model = propose_on_hosts(tmp_path, engine, [reply(fix_answer()), reply(fix_answer(new=SLOWER))])
    assert len(model.requests) == 2
    first, second = (r["messages"][1]["content"] for r in model.requests)
    assert "already proposed for this round" not in first
    assert "already proposed for this round" in second and "llm-1: Gather-then-cast" in second
    assert "+            kv = k_buffer[kv_indices].to(q.dtype)  # gather" in second  # its diff, as data
    sends = cmd.goto
    assert [(s.arg.proposal.source, s.arg.host.name) for s in sends] == [("llm-1", "h0"), ("llm-2", "h1")]
    assert [p.proposer for p in cmd.update["candidates"]] == ["llm", "llm"]
    assert sends[0].arg.proposal.diff != sends[1].arg.proposal.diff
    assert cmd.update["llm_usage"].calls == 2 and cmd.update["decisions"] == []
    assert (
        "2 candidates, tried at once on [[hosts]]: llm-1 on h0, llm-2 on h1"
        in cmd.update["transitions"][0].note
    )


def test_a_second_candidate_equal_to_the_first_is_sent_back_for_repair(tmp_path: Path, engine: Path) -> None:
    script = [reply(fix_answer()), reply(fix_answer()), reply(fix_answer(new=SLOWER))]
    cmd, model = propose_on_hosts(tmp_path, engine, script)
    assert len(model.requests) == 3
    repair = model.requests[2]["messages"][-1]["content"]
    assert "distinct check failed" in repair and "same as candidate llm-1" in repair, repair
    assert [s.arg.proposal.source for s in cmd.goto] == ["llm-1", "llm-2"]
    assert cmd.goto[1].arg.proposal.origin.repairs == 1


def test_a_round_has_a_candidate_per_host_and_parallel_caps_how_many_are_tried_at_once(
    tmp_path: Path, engine: Path
) -> None:
    third = NEW.replace("# gather the request's rows, then cast only those", "# a third change")
    script = [reply(fix_answer()), reply(fix_answer(new=SLOWER)), reply(fix_answer(new=third))]
    cmd, model = propose_on_hosts(tmp_path, engine, script, n=3, parallel=1)
    assert len(model.requests) == 3
    assert "llm-1:" in model.requests[2]["messages"][1]["content"]
    assert "llm-2:" in model.requests[2]["messages"][1]["content"]
    assert [(s.arg.proposal.source, s.arg.host.name) for s in cmd.goto] == [("llm-1", "h0")]
    assert cmd.update["trial_queue"] == ["llm-2", "llm-3"]


def test_one_host_keeps_a_round_of_one_named_as_without_hosts(tmp_path: Path, engine: Path) -> None:
    cmd, model = propose_on_hosts(tmp_path, engine, [reply(fix_answer())], n=1)
    assert len(model.requests) == 1 and cmd.goto == "approve"
    assert cmd.update["proposal"].source == "llm"


def test_a_failed_conversation_in_a_round_is_recorded_and_the_other_candidate_goes_alone(
    tmp_path: Path, engine: Path
) -> None:
    script = [reply("no edits")] * 4 + [reply(fix_answer())]
    cmd, model = propose_on_hosts(tmp_path, engine, script)
    assert len(model.requests) == 5 and cmd.goto == "approve"
    (failed,) = cmd.update["decisions"]
    assert failed.source == "llm" and failed.verdict == "failed"
    assert "Already tried in this session" in model.requests[4]["messages"][1]["content"]
    assert cmd.update["proposal"].source == "llm-1"
    assert cmd.update["llm_usage"].calls == 5


def test_the_token_budget_ends_a_round_early(tmp_path: Path, engine: Path) -> None:
    script = [{**reply(fix_answer()), "prompt_tokens": 900, "completion_tokens": 200}]
    cmd, model = propose_on_hosts(tmp_path, engine, script, max_tokens=1000)
    assert len(model.requests) == 1 and cmd.goto == "approve"  # the second conversation is not started
    assert cmd.update["llm_usage"].tokens == 1100


def test_a_playbook_may_not_take_a_model_candidates_id() -> None:
    from pydantic import ValidationError

    from playbooks.engine import load_playbooks

    (book,) = [b for b in load_playbooks() if b.id == "kv-cache-full-pool-cast"]
    data = book.model_dump()
    for bad in ("llm", "llm-2"):
        with pytest.raises(ValidationError, match="reserved for model-written candidates"):
            type(book).model_validate({**data, "id": bad})
    assert type(book).model_validate({**data, "id": "llm-ish-fusion"}).id == "llm-ish-fusion"


def test_model_candidates_wait_for_a_human_by_default_even_under_approve_auto(
    tmp_path: Path, engine: Path
) -> None:
    from agent.proposer.chat.asking import needs_human

    assert ProposerConfig().approve == "manual"
    script = [reply(fix_answer()), reply(fix_answer(new=SLOWER))]
    cmd, _ = propose_on_hosts(tmp_path, engine, script, approve="manual")
    assert cmd.goto == "approve" and [p.source for p in cmd.update["candidates"]] == ["llm-1", "llm-2"]
    assert "waiting for approval" in cmd.update["transitions"][0].note
    state = loop_state(tmp_path, engine, "http://127.0.0.1:9/v1", approve="manual")
    assert state.options.approve == "auto"
    model_patch, playbook_patch = (
        cmd.update["candidates"][0],
        cmd.update["candidates"][0].model_copy(
            update={"origin": None, "playbook": "kv-cache-full-pool-cast"}
        ),
    )
    assert needs_human(state, [model_patch]) and not needs_human(state, [playbook_patch])
    auto = state.target.proposer.model_copy(update={"approve": "auto"})
    trusted = state.model_copy(update={"target": state.target.model_copy(update={"proposer": auto})})
    assert not needs_human(trusted, [model_patch])
