"""Issue 63 item 8: a resumed session numbered its launches from the checkpoint, so a launch an
attempt cut short had made took its number again (`launch #2` twice, its log and server mark
reused). The store keeps, when a resume supersedes launches, the highest number they used (`cut`
inputs); a session with `LoopOptions.launches_past_cuts` numbers its launches past it from then
on, live (`LiveDoor.launch_floor`) and in a replay (`ReplayDoor.launch_floor`, by position), and an
export carries it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.context import past_cuts
from agent.sessions.archive import export_session, import_session
from agent.sessions.revive import spawned
from state.config.options import LoopOptions
from state.door.records import ToolCallRecord
from state.sessions.loop import LoopState
from state.sessions.session import SessionInfo
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor
from tools.door.replay import ReplayDoor
from tools.errors import ConfigError
from tools.store.sessions import SessionStore

SID = "20261206-090000-abcd"
DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def call(
    seq: int, name: str = "repo.snapshot", number: int | None = None, node: str = "launch"
) -> ToolCallRecord:
    inp = {"launch_number": number} if number is not None else {"repo": "/r"}
    return ToolCallRecord(session_id=SID, seq=seq, node=node, name=name, input=inp, output={},
                          error=None, started_at=datetime(2026, 12, 6, tzinfo=UTC), duration_s=0.1)  # fmt: skip


def state(tmp_path: Path, launches: int = 1, past_cuts: bool = True) -> LoopState:
    opts = LoopOptions(
        session_dir=tmp_path / "sessions" / SID, python="python3", launches_past_cuts=past_cuts
    )
    return LoopState(session_id=SID, target=load_target(DEMO_TOML), options=opts, launches=launches)


def opened(home: Path) -> SessionStore:
    home.mkdir(parents=True, exist_ok=True)
    return SessionStore.open(home)


@pytest.fixture
def store(tmp_path: Path):
    s = SessionStore.open(tmp_path)
    at = datetime(2026, 12, 6, tzinfo=UTC)
    s.put_session(
        SessionInfo(
            id=SID, created_at=at, target_name="t", target_path=None, repo=Path("/r"), status="running"
        )
    )
    yield s
    s.close()


def test_a_resume_numbers_launches_past_those_its_cut_attempts_used(tmp_path: Path, store) -> None:
    for c in (call(0), call(1, "server.launch", 1), call(2), call(3, "server.launch", 2, "relaunch")):
        store.record(c)
    assert store.supersede_after(SID, 4) == 0 and store.cut_launches(SID) == []  # nothing cut
    assert store.supersede_after(SID, 2) == 2  # the relaunch's attempt cut short: #2 was used
    assert store.cut_launches(SID) == [(4, 2)]  # from call #4 on, past #2
    store.record(call(4))
    store.record(call(5, "server.launch", 3, "relaunch"))
    assert store.supersede_after(SID, 6, spawned=4) == 0  # a launch killed before its record
    assert store.cut_launches(SID) == [(4, 2), (6, 4)]
    assert LiveDoor(SID, store).launch_floor() == 4
    assert LiveDoor(SID, MemoryRecorder()).launch_floor() == 0  # a recorder that keeps none

    # A replay sees a cut from the call that followed its resume on.
    replay = ReplayDoor(SID, store.tool_calls(SID), store.cut_launches(SID))
    floors = []
    for _ in range(4):  # the current calls: #0, #1, #4, #5
        floors.append(replay.launch_floor())
        replay.position += 1
    assert [*floors, replay.launch_floor()] == [0, 0, 2, 2, 4]


def test_a_step_takes_the_floor_only_where_the_session_numbers_past_cuts(tmp_path: Path, store) -> None:
    store.record(call(0, "server.launch", 3))
    store.supersede_after(SID, 0)
    door = LiveDoor(SID, store)
    assert past_cuts(state(tmp_path, launches=1), door).launches == 3
    assert past_cuts(state(tmp_path, launches=5), door).launches == 5  # already past it
    recorded_before = state(tmp_path, launches=1, past_cuts=False)
    assert past_cuts(recorded_before, door) is recorded_before  # replays as it was recorded
    assert past_cuts(state(tmp_path), ReplayDoor(SID, [])).launches == 1


def test_a_pid_file_names_a_launch_killed_before_its_record(tmp_path: Path) -> None:
    s = state(tmp_path, launches=2)
    folder = s.options.session_dir
    folder.mkdir(parents=True)
    assert spawned(s) == 0
    (folder / "server.pid").write_text(json.dumps({"mark": "x#2", "port": 1, "launch_number": 2}))
    assert spawned(s) == 0  # the checkpoint's own launch
    (folder / "reference.pid").write_text(json.dumps({"mark": "x#3", "port": 1, "launch_number": 3}))
    (folder / "broken.pid").write_text("{")
    assert spawned(s) == 3


def test_an_export_carries_the_cuts_and_an_older_one_has_none(tmp_path: Path, store) -> None:
    store.add_input(SID, "initial", state(tmp_path).model_dump(mode="json"))
    store.record(call(0, "server.launch", 1))
    store.supersede_after(SID, 0)
    out = tmp_path / "s.json"
    export_session(store, SID, out)
    other = opened(tmp_path / "other")
    try:
        assert import_session(other, out) == SID and other.cut_launches(SID) == [(1, 1)]
    finally:
        other.close()
    doc = json.loads(out.read_text())
    for cuts, ok in (([], True), ([{"seq": 1, "launch": "1"}], False), ({"seq": 1}, False)):
        older = tmp_path / f"older-{ok}-{len(cuts)}.json"
        older.write_text(json.dumps({**doc, "cuts": cuts}))
        fresh = opened(tmp_path / older.stem)
        try:
            if ok:
                assert import_session(fresh, older) == SID and fresh.cut_launches(SID) == []
            else:
                with pytest.raises(ConfigError, match="field `cuts`"):
                    import_session(fresh, older)
        finally:
            fresh.close()
    del doc["cuts"]  # an export made before cuts were kept
    out.write_text(json.dumps(doc))
    last = opened(tmp_path / "last")
    try:
        assert import_session(last, out) == SID and last.cut_launches(SID) == []
    finally:
        last.close()
