"""A session run here is read from its checkpoints without the graph (issue 63,
agent/sessions/reading/direct.py): its state, history, pending approval and checkpoint status are
those the graph reads (`runner.Sessions`), for a finished session, one paused for approval and one
on PostgreSQL, and `perfloop show last --json` of a finished one loads neither LangGraph's graph
machinery nor the graph. Real sessions: `perfloop run` of tests/e2e's CPU demo target, one
iteration (`--approve auto`: it ends; `manual`: it pauses at its first proposal)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langgraph._internal import _constants

from agent.sessions.reading import direct
from agent.sessions.reading.direct import Direct, unknown
from agent.sessions.reading.stored import StoredSessions
from agent.sessions.runner import Sessions
from state.sessions.loop import LoopState
from tests.e2e.conftest import make_repo, perfloop, write_target
from tests.unit.test_cli_startup import started
from tools.store.sessions import SessionStore

READS = ("state", "has_state", "history", "pending_approval", "checkpoint_status")
GRAPH = (
    "agent.graph",
    "agent.sessions.runner",
    "langgraph.pregel",
    "langgraph.graph",
    "langchain_core.tracers",
)
"""What reading a finished session's checkpoints must not load."""


def run(tmp: Path, home: Path, approve: str, env: dict[str, str] | None = None) -> str:
    """The id of a session `perfloop run` made of the CPU demo target (one iteration)."""
    repo = make_repo(tmp / f"engine-{approve}")
    target = write_target(tmp / f"{approve}.toml", repo)
    done = perfloop(
        home, "run", str(target), "--approve", approve, "--max-iterations", "1", "--json", env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return str(json.loads(done.stdout)["session"])


def no_graph(_: StoredSessions) -> StoredSessions:
    raise AssertionError("the graph was opened")


def graphed(stored: StoredSessions) -> StoredSessions:
    return Sessions(stored.home, stored.store)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("direct")
    home = tmp / "home"
    return home, {approve: run(tmp, home, approve) for approve in ("auto", "manual")}


def same_as_the_graph(home: Path, sid: str, graphless: bool) -> dict:
    """Every read of `Direct` and of `StoredSessions` next to the graph's (`graphless`: the
    finished session's, none of which needs the graph); the graph's reads."""
    graph = Sessions(home)
    want = {w: getattr(graph, w)(sid) for w in READS}
    stored = StoredSessions(home, graphed=no_graph if graphless else graphed)
    for what in READS:
        got = getattr(stored.direct(), what)(sid)
        assert got == want[what] or (unknown(got) and not graphless), what
        assert getattr(stored, what)(sid) == want[what], what
    assert stored.last_state(sid) == want["history"][-1] == want["state"]
    return want


def test_a_finished_session_is_read_without_the_graph_as_the_graph_reads_it(
    runs: tuple[Path, dict[str, str]],
) -> None:
    home, sids = runs
    want = same_as_the_graph(home, sids["auto"], graphless=True)
    assert want["has_state"] and want["pending_approval"] is None and want["checkpoint_status"][3] == []
    assert len(want["history"]) > 3 and want["state"].status == "done"


def test_a_paused_session_is_read_as_the_graph_reads_it(runs: tuple[Path, dict[str, str]]) -> None:
    """Its approval request from the interrupt pending; the nodes it runs next only the graph
    tells (direct.py gives UNKNOWN, the graph answers)."""
    home, sids = runs
    want = same_as_the_graph(home, sids["manual"], graphless=False)
    request = want["pending_approval"]
    assert request is not None and request["session"] == sids["manual"] and request["digest"]
    assert want["checkpoint_status"][3] == ["approve"]
    store = SessionStore.open(home)
    try:
        from agent.sessions.checkpoint import open_checkpointer

        read = Direct(open_checkpointer(home, None, store))
        assert read.pending_approval(sids["manual"]) == request  # read without the graph
        assert unknown(read.checkpoint_status(sids["manual"]))
    finally:
        store.close()


def test_show_of_a_finished_session_loads_no_graph(runs: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    home, sids = runs
    (tmp_path / "home").symlink_to(home)
    mods, proc = started(tmp_path, "show", sids["auto"], "--json", heavy=GRAPH)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["session"]["id"] == sids["auto"]
    assert mods == [], f"perfloop show --json of a finished session loaded {mods}"
    mods, proc = started(tmp_path, "show", sids["manual"], "--json", heavy=GRAPH)
    assert proc.returncode == 0 and "agent.graph" in mods, mods  # its next nodes: the graph's


def test_a_finished_session_on_postgresql_is_read_as_the_graph_reads_it(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    sid = run(tmp_path, home, "auto", env={"PERFLOOP_STORE": pg_url})
    monkeypatch.setenv("PERFLOOP_STORE", pg_url)
    assert not (home / "checkpoints.sqlite").exists()
    same_as_the_graph(home, sid, graphless=True)


def test_what_direct_reads_assumes_of_langgraph_and_the_graph() -> None:
    """Its constants are LangGraph's, and every node of the graph is triggered by a channel of
    LangGraph's own, never a state field: a checkpoint holding state fields alone runs none."""
    from agent.graph import compile_graph

    assert (direct.INTERRUPT, direct.NULL_TASK_ID) == (_constants.INTERRUPT, _constants.NULL_TASK_ID)
    graph = compile_graph(None)
    triggers = {t for node in graph.nodes.values() for t in node.triggers}
    assert triggers and not triggers & LoopState.model_fields.keys(), triggers
