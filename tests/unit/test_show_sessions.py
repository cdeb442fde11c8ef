"""What `perfloop sessions` and `perfloop show` print of one session, as a newcomer met them
(issue 57): one speedup in both JSON documents (the judged one); a session cut short and resumed
counts every launch it made and `show` says when and in which step it was cut (piped tables:
tests/unit/test_front_door.py). The real CLI on a real store (the demo session's recording
imported), and the store's own superseded calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.cli.commands.show import interruption_line, interruptions
from agent.sessions.summary import launches_made, summarize
from state.door.records import ToolCallRecord
from tests.unit.aa_door import session
from tools.store.sessions import SessionStore

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "sessions" / "demo-session.json.gz"
PERFLOOP = Path(sys.executable).parent / "perfloop"


def perfloop(home: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI, its output piped (not a terminal) and no $COLUMNS: as `| less` or a CI log."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env |= {"PERFLOOP_HOME": str(home), "PERFLOOP_PROGRESS": "off"}
    done = subprocess.run(
        [str(PERFLOOP), *args], env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the demo's recorded session, its summary given a judged speedup (8.22x)
    beside a baseline-to-final ratio (7.24x), as issue 57's session had."""
    home = tmp_path_factory.mktemp("shown") / "home"
    perfloop(home, "import", str(RECORDING))
    store = SessionStore.open(home)
    [info] = store.list_sessions()
    assert info.summary is not None
    judged = {"speedup": 7.24, "speedup_judged": 8.22, "speedup_ci": [6.9, 9.8], "verdict": "faster"}
    store.put_session(info.model_copy(update={"summary": info.summary.model_copy(update=judged)}))
    store.close()
    return home


def test_sessions_and_show_json_give_the_same_judged_speedup(home: Path) -> None:
    """`sessions --json` said 8.22 (judged), `show --json` 7.24 (baseline to final, unjudged)."""
    listed = json.loads(perfloop(home, "sessions", "--json").stdout)[0]["summary"]
    shown = json.loads(perfloop(home, "show", "last", "--json").stdout)["session"]["summary"]
    assert listed == shown
    assert shown["speedup"] == 8.22 and shown["speedup_baseline_final"] == 7.24


def test_a_resumed_session_counts_every_launch_and_show_says_where_it_was_cut(tmp_path: Path) -> None:
    """Issue 57: after an interrupt and a resume the summary counted 3 server launches of the 7
    made, and `show` did not show the interruption. Calls recorded in a real store: the first
    attempt launched the server twice and was cut (SIGINT) in `measure`; the resume superseded
    its calls and launched again."""
    (tmp_path / "home").mkdir()
    store = SessionStore.open(tmp_path / "home")
    t0 = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)
    sid = "20261205-100000-abcd"

    def call(seq: int, node: str, name: str, at_s: float, cut: bool = False) -> None:
        store.record(
            ToolCallRecord(
                session_id=sid, seq=seq, node=node, name=name, input={}, output=None if cut else {},
                error=None, started_at=t0 + timedelta(seconds=at_s), duration_s=2.0,
            )
        )  # fmt: skip

    call(0, "launch", "server.launch", 0)
    call(1, "baseline", "bench.measure", 10)
    call(2, "relaunch", "server.launch", 20)
    call(3, "measure", "bench.measure", 30, cut=True)  # SIGINT here: the attempt ends, left interrupted
    state = session(tmp_path, session_id=sid).model_copy(update={"calls_done": 2, "launches": 1})
    cut = state.model_copy(update={"status": "interrupted"})
    every = store.tool_calls(sid, include_superseded=True)
    [waiting] = interruptions(every, store.tool_calls(sid), cut)
    assert waiting == {
        "at": "2026-12-05T10:00:32+00:00",
        "step": "measure",
        "call": "bench.measure",
        "signal": True,
        "calls": 2,
        "server_launches": 1,
        "resumed": False,
    }
    assert interruption_line(waiting, sid) == (
        "interrupted at about 2026-12-05 10:00:32 UTC in step measure (during bench.measure); "
        f"not resumed yet: perfloop resume {sid}"
    )
    assert store.supersede_after(sid, 2) == 2  # the resume
    call(4, "relaunch", "server.launch", 60, cut=True)  # SIGTERM: cut again, in the same step
    assert store.supersede_after(sid, 2) == 1  # the second resume
    call(5, "relaunch", "server.launch", 90)  # SIGKILLed after this call: no record of the cut
    assert store.supersede_after(sid, 2) == 1  # the third resume
    call(6, "relaunch", "server.launch", 120)
    call(7, "measure", "bench.measure", 130)
    done = state.model_copy(update={"status": "done", "calls_done": 8, "launches": 2})
    every, current = store.tool_calls(sid, include_superseded=True), store.tool_calls(sid)
    first, second, killed = interruptions(every, current, done)  # adjacent runs, split at each signal
    assert first["resumed"] and (first["step"], first["calls"], first["server_launches"]) == ("measure", 2, 1)
    assert interruption_line(first, sid).endswith(
        "2 tool call(s) and 1 server launch(es) of that attempt, made again on resume"
    )
    assert (second["step"], second["signal"], second["calls"]) == ("relaunch", True, 1)
    assert not killed["signal"] and interruption_line(killed, sid).startswith(
        "cut short (killed, or interrupted between calls) after 2026-12-05 10:01:32 UTC in step relaunch"
    )
    assert launches_made(every) == 5 and launches_made(current) == 2
    assert summarize(done, "done", every).server_launches == 5  # the state's own path counts 2
    assert summarize(done, "done").server_launches == 2
    assert interruptions(current, current, done) == []  # never cut: nothing said
    store.close()
