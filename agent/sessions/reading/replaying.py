"""A recorded session run again in memory, every tool call answered from its recording: no host,
no file, no checkpointer (`perfloop replay`, `import`, and the states of an imported recording that
`show` and `report` read, replayed.py). LangGraph and the graph load here; the checkpointers, the
database drivers, the SSH hosts and the live door do not (runner.py has those)."""

from __future__ import annotations

from pathlib import Path

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, StateSnapshot

from agent.context import LoopContext
from agent.graph import Graph, compile_graph
from agent.sessions.binding import rebuilt, view
from agent.sessions.reading import direct
from agent.sessions.reading.replayed import keep
from agent.sessions.reading.serde import serializer
from agent.sessions.summary import summarize as summarize_session
from state.sessions.loop import LoopState
from state.sessions.session import Summary
from tools.door.replay import ReplayDivergence, ReplayDoor
from tools.errors import ConfigError
from tools.store.sessions import SessionStore


def thread(thread_id: str) -> RunnableConfig:
    """The LangGraph config of one thread (a session's checkpoints)."""
    return {"configurable": {"thread_id": thread_id}}


def lineage(graph: Graph, config: RunnableConfig) -> list[StateSnapshot]:
    """The thread's checkpoints from its first to its latest, following parents (direct.py
    `lineage`: abandoned ones left out)."""
    return direct.lineage(graph.get_state_history(config))


def states(graph: Graph, cfg: RunnableConfig) -> list[LoopState]:
    """The thread's states from its first checkpoint to its latest (`lineage`)."""
    return [LoopState.model_validate(s.values) for s in lineage(graph, cfg) if "session_id" in s.values]


def pending(graph: Graph, cfg: RunnableConfig) -> dict | None:
    """The approval request waited on, as shown: with the exact argv and its digest (binding.py)."""
    for task in (snap := graph.get_state(cfg)).tasks:
        for intr in task.interrupts:
            return view(state := LoopState.model_validate(snap.values), rebuilt(state, intr.value))
    return None


def replayed(store: SessionStore, session_id: str) -> tuple[Graph, RunnableConfig, ReplayDoor]:
    """The graph run in memory with every tool call answered from the recording."""
    initial = store.inputs(session_id, "initial")
    if not initial:
        raise ConfigError(f"session {session_id} has no recorded initial state; it cannot be replayed")
    answers = store.inputs(session_id, "answer")
    door = ReplayDoor(session_id, store.tool_calls(session_id), store.cut_launches(session_id))
    graph = compile_graph(InMemorySaver(serde=serializer()))
    cfg = thread(f"replay-{session_id}")
    ctx = LoopContext(door=door)
    graph.invoke(LoopState.model_validate(initial[0]), cfg, context=ctx)
    for answer in answers:
        if pending(graph, cfg) is None:
            msg = f"the recording has an approval answer ({answer}) but the replayed session did not pause for one"
            raise ReplayDivergence(msg)
        graph.invoke(Command(resume=answer), cfg, context=ctx)
    return graph, cfg, door


def run(
    store: SessionStore, home: Path, session_id: str, made: str | None
) -> tuple[list[LoopState], Summary, str | None]:
    """Replay the recording in memory: its states oldest first, its summary (paused when it waits
    on an approval the recording did not answer), and how it diverged when the recording holds
    calls it did not make (else None). Its states and summary are kept under the key `made`
    (replayed.py; none when None) only when it made every call: a diverging replay is never kept."""
    graph, cfg, door = replayed(store, session_id)
    every = states(graph, cfg)
    status = "paused" if pending(graph, cfg) is not None else every[-1].status
    calls = store.tool_calls(session_id, include_superseded=True)  # cut attempts' launches
    summary = summarize_session(every[-1], status, calls)
    diverged = None
    if unplayed := door.unplayed():
        diverged = (
            f"the replay ended but the recording has {len(unplayed)} more "
            f"call(s), next: #{door.position} {unplayed[0].name} from node {unplayed[0].node}"
        )
    else:
        keep(home, session_id, made, every, summary)
    return every, summary, diverged


def replay(
    store: SessionStore, home: Path, session_id: str, made: str | None = None
) -> tuple[LoopState, Summary]:
    """Run the graph again with every tool call answered from the recording (its states kept under
    `home` with the key `made`, replayed.py, unless it diverged): its last state and its summary."""
    every, summary, diverged = run(store, home, session_id, made)
    if diverged is not None:
        raise ReplayDivergence(diverged)
    return every[-1], summary
