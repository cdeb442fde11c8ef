"""state/base.py, state/sessions/loop.py: fields renamed since sessions were first recorded read by either name
and are written by the old one, in exports (JSON) and in LangGraph checkpoints (msgpack) alike."""

from __future__ import annotations

from pathlib import Path

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.cli.target import load_target
from agent.graph import compile_graph
from agent.sessions.checkpoint import open_checkpointer, serializer
from state.config.options import LoopOptions
from state.measurement.measure import Measurement, RequestRecord
from state.sessions.loop import Decision, LoopState, Proposal
from tools.client.stats import summarize

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"
RECORDED = {"iteration": 1, "playbook": "llm-1", "verdict": "rejected", "reason": "r"}


def candidate_measurement() -> Measurement:
    request = RequestRecord(prompt_index=0, ttft_ms=1.0, itl_ms=[2.0], text="a", completion_tokens=2)
    return summarize("c", "tree", [request], 1, 1.0)


def test_a_decision_recorded_with_its_old_field_name_reads_and_writes_it() -> None:
    d = Decision.model_validate(RECORDED)
    assert d.source == "llm-1" and Decision(**RECORDED) == d == Decision(
        iteration=1, source="llm-1", verdict="rejected", reason="r"
    )
    dumped = d.model_dump(mode="json")
    assert dumped["playbook"] == "llm-1" and "source" not in dumped
    kind, data = serializer().dumps_typed(d)
    assert serializer().loads_typed((kind, data)) == d


def test_the_candidate_measurement_reads_and_writes_its_recorded_name(tmp_path: Path) -> None:
    m = candidate_measurement()
    recorded = {
        "session_id": "s1",
        "target": load_target(DEMO_TOML).model_dump(mode="json"),
        "options": LoopOptions(session_dir=tmp_path, python="python3").model_dump(mode="json"),
        "candidate": m.model_dump(mode="json"),
    }
    state = LoopState.model_validate(recorded)
    assert state.candidate_measurement == m and state.candidates == []
    assert state.model_dump(mode="json")["candidate"] == recorded["candidate"]
    assert (
        LoopState(**{**recorded, "candidate": None}).model_copy(update={"candidate_measurement": m}) == state
    )


def test_a_proposal_recorded_with_its_old_field_name_reads_and_writes_it() -> None:
    recorded = {"iteration": 1, "playbook": "llm", "title": "t", "explanation": "e", "diff": "", "files": []}
    recorded |= {"expected_gain_share": 0.1, "expected_gain_ms": None, "evidence": []}
    p = Proposal.model_validate(recorded)
    assert p.source == "llm" and p.model_dump(mode="json") == Proposal.model_validate(recorded).model_dump()
    assert p.model_copy(update={"source": "llm-2"}).model_dump()["playbook"] == "llm-2"


def test_a_checkpoint_written_before_the_rename_reads_under_the_new_channel(tmp_path: Path) -> None:
    m = candidate_measurement()
    saver = open_checkpointer(tmp_path)
    cp = empty_checkpoint()
    cp["channel_values"] = {"session_id": "s1", "candidate": m}
    cp["channel_versions"] = {"session_id": "1", "candidate": "1"}
    cp["versions_seen"] = {"measure": {"candidate": "1"}}
    config: RunnableConfig = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    saver.put(config, cp, {"source": "loop", "step": 1}, {"session_id": "1", "candidate": "1"})
    assert isinstance(saver, SqliteSaver)  # no url: SQLite
    saver.conn.commit()
    values = compile_graph(saver).get_state({"configurable": {"thread_id": "t1"}}).values
    assert values["candidate_measurement"] == m and "candidate" not in values
    found = saver.get_tuple(config)
    assert found is not None and found.checkpoint["versions_seen"]["measure"] == {
        "candidate_measurement": "1"
    }
