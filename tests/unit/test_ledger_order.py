"""agent/sessions/trust/: what this machine signed (the ledger) is checked against the store in the
order it is written. The writer puts a checkpoint or a pending write in the store first and the
ledger after it; a reader (`perfloop show`, the approval page, a test polling a running session)
that read the store before that writer moved on, and the ledger after, saw a ledger ahead of what
it read: "rolled back in the store ... this machine signed number N+1", or a pending write "that
this machine wrote was deleted", for a session nobody touched. Read ledger first, store second,
everything the ledger holds is in what was read, unless a peer deleted it (still refused)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from agent.cli.target import load_target
from agent.sessions.checkpoint import open_checkpointer
from agent.sessions.runner import thread
from state.config.options import LoopOptions
from state.sessions.loop import LoopState
from tools.errors import ConfigError
from tools.store.sessions import SessionStore

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"
SID = "20260101-000000-abcd"
TASK = "00000000-0000-0000-0000-00000000000a"


class Writer:
    """A session's own process: its checkpoints, one after another, and a task's pending writes."""

    def __init__(self, home: Path, store: SessionStore) -> None:
        self.saver: object = open_checkpointer(home, None, store)
        s = LoopState(
            session_id=SID,
            target=load_target(DEMO_TOML),
            options=LoopOptions(session_dir=home / "sessions" / SID, python="python3"),
        )
        self.values = {k: getattr(s, k) for k in LoopState.model_fields}
        self.config: dict = {"configurable": {"thread_id": SID, "checkpoint_ns": ""}}

    def checkpoint(self) -> str:
        cp = empty_checkpoint()
        cp["channel_values"] = dict(self.values)
        self.config = self.saver.put(self.config, cp, {"step": 1}, {})  # type: ignore[attr-defined]
        return str(self.config["configurable"]["checkpoint_id"])

    def trial_done(self) -> None:
        self.saver.put_writes(self.config, [("trials", ["a trial"]), ("branch:to:join", None)], TASK)  # type: ignore[attr-defined]


@pytest.fixture
def sides(tmp_path: Path) -> tuple[Writer, object]:
    store = SessionStore.open(tmp_path)
    return Writer(tmp_path, store), open_checkpointer(tmp_path, None, store)


def reading(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]) -> None:
    """The next store read of the latest checkpoint is followed at once by `meanwhile` (the
    writer moving on between the reader's store read and its ledger read)."""
    read = SqliteSaver.get_tuple
    left = [meanwhile]

    def read_then_write(self: SqliteSaver, config: RunnableConfig) -> object:
        found = read(self, config)
        if left and not config["configurable"].get("checkpoint_id"):
            left.pop()()
        return found

    monkeypatch.setattr(SqliteSaver, "get_tuple", read_then_write)


def test_a_reader_the_writer_overtook_is_not_told_of_a_rollback(sides, monkeypatch, tmp_path) -> None:
    writer, reader = sides
    first = writer.checkpoint()
    reading(monkeypatch, writer.checkpoint)
    found = reader.get_tuple(thread(SID))
    assert found.config["configurable"]["checkpoint_id"] == first  # read before the writer moved on
    assert reader.status(thread(SID))[1] is None
    monkeypatch.undo()
    db = sqlite3.connect(tmp_path / "checkpoints.sqlite")  # a peer deletes the newest checkpoint
    db.execute("DELETE FROM checkpoints WHERE checkpoint_id != ?", (first,))
    db.commit()
    with pytest.raises(ConfigError, match=r"rolled back in the store.*signed number 2"):
        reader.get_tuple(thread(SID))


def test_a_reader_the_trials_writes_overtook_is_not_told_they_were_deleted(
    sides, monkeypatch, tmp_path
) -> None:
    writer, reader = sides
    writer.checkpoint()
    reading(monkeypatch, writer.trial_done)
    found = reader.get_tuple(thread(SID))
    assert found.pending_writes == []  # read before the trial's writes were
    assert reader.status(thread(SID))[1] is None
    monkeypatch.undo()
    assert len(reader.get_tuple(thread(SID)).pending_writes) == 2
    db = sqlite3.connect(tmp_path / "checkpoints.sqlite")  # a peer deletes them
    db.execute("DELETE FROM writes")
    db.commit()
    with pytest.raises(
        ConfigError, match=r"pending write trials \(task 00000000\), branch:to:join .*was deleted"
    ):
        reader.get_tuple(thread(SID))
