"""A checkpointed session's states read from the checkpointer alone (issue 63): what `show`,
`report` and `replay` read of a session run here, without LangGraph's graph machinery or the graph
(their imports cost `show last` 1.3 s). The checkpointer is the one `runner.Sessions` opens
(agent/sessions/checkpoint.py: its signature checks and renamed channels kept), read the way
`graph.get_state` and `graph.get_state_history` read it.

A state read here equals the graph's when the checkpoint's pending writes change no value: the
graph applies the writes of the null task (an update's input) and, reading the latest checkpoint,
those of tasks that already finished. Only a checkpoint whose pending writes are interrupts is
read here; any other write leaves the read to the graph (UNKNOWN: `stored.py` then asks it). The
nodes that run next need the graph's topology: only a checkpoint that holds nothing but the
state's own channels (no task sent, no edge taken, no write pending) has none, as every node of
the graph is triggered by a channel of LangGraph's own (tests/integration/test_direct_reads.py).

May import: the checkpointer (LangGraph's savers), `state`; `agent.sessions.binding` where a
session waits on an approval. Never `langgraph.graph`, `langgraph.pregel`, `agent.graph` or
`agent.sessions.runner`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from state.sessions.loop import LoopState

INTERRUPT = "__interrupt__"
"""LangGraph's channel of an interrupt's value (langgraph._internal._constants.INTERRUPT)."""
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
"""The task id of writes that are input to a step, not a task's (its NULL_TASK_ID)."""
UNKNOWN: Any = object()
"""What a read returns when only the graph can tell (the caller asks it)."""


def unknown(found: object) -> bool:
    """Whether a read is UNKNOWN (only the graph can tell)."""
    return found is UNKNOWN


class Checkpointed(Protocol):
    """A checkpoint as listed: its config and its parent's."""

    @property
    def config(self) -> RunnableConfig: ...
    @property
    def parent_config(self) -> RunnableConfig | None: ...


Step = TypeVar("Step", bound=Checkpointed)


def config(session_id: str) -> RunnableConfig:
    """The config of the session's thread at its latest checkpoint, as the graph reads it."""
    return {"configurable": {"thread_id": session_id, "checkpoint_ns": ""}}


def values(found: CheckpointTuple) -> dict[str, Any]:
    """The state's channels in a checkpoint (the graph's `values`, pending writes left out)."""
    channels = found.checkpoint["channel_values"]
    return {k: v for k, v in channels.items() if k in LoopState.model_fields}


def settled(found: CheckpointTuple, latest: bool) -> bool:
    """Whether no pending write of the checkpoint changes its values as the graph reads them
    (`latest`: read as the session's current state, where finished tasks' writes count)."""
    writes = found.pending_writes or []
    if any(t == NULL_TASK_ID for t, _, _ in writes) or found.checkpoint.get("v", 0) < 4:
        return False
    return not latest or all(c == INTERRUPT for _, c, _ in writes)


class Direct:
    """The reads of `StoredSessions` that need no graph, on an open checkpointer; each returns
    UNKNOWN where the graph must answer."""

    def __init__(self, saver: BaseCheckpointSaver) -> None:
        self.saver = saver

    def latest(self, session_id: str) -> CheckpointTuple | None:
        """The session's latest checkpoint, checked as the graph's read checks it (UNKNOWN when
        its pending writes would change what the graph reads)."""
        found = self.saver.get_tuple(config(session_id))
        return found if found is None or settled(found, latest=True) else UNKNOWN

    def state(self, session_id: str) -> LoopState | None:
        """The latest state (None: no state), or UNKNOWN."""
        if unknown(found := self.latest(session_id)):
            return UNKNOWN
        held = values(found) if found is not None else {}
        return LoopState.model_validate(held) if held else None

    def has_state(self, session_id: str) -> bool:
        """Whether the latest checkpoint holds a state, or UNKNOWN."""
        found = self.state(session_id)
        return UNKNOWN if unknown(found) else found is not None

    def history(self, session_id: str) -> list[LoopState]:
        """Every state from the first checkpoint to the latest, following parents (`lineage`: a
        branch abandoned by a relaunch left out), or UNKNOWN (also when the latest
        holds no state: `Sessions.history` then reads the replay)."""
        found = list(self.saver.list(config(session_id)))
        if not found or not values(found[0]) or not all(settled(f, latest=False) for f in found):
            return UNKNOWN
        return [LoopState.model_validate(v) for f in lineage(found) if "session_id" in (v := values(f))]

    def pending_approval(self, session_id: str) -> dict | None:
        """The approval request the latest checkpoint waits on (None: none), or UNKNOWN."""
        if (found := self.latest(session_id)) is None:
            return None
        if unknown(found):
            return UNKNOWN
        asked = [v for _, c, v in found.pending_writes or [] if c == INTERRUPT]
        if not asked:
            return None
        intrs = asked[0] if isinstance(asked[0], (list, tuple)) else [asked[0]]
        if len(asked) > 1 or len(intrs) != 1:
            return UNKNOWN  # several: the graph's order of its tasks decides which is shown
        from agent.sessions.binding import rebuilt, view  # the approval step's (LangGraph's runtime)

        state = LoopState.model_validate(values(found))
        return view(state, rebuilt(state, intrs[0].value))

    def next_nodes(self, session_id: str) -> list[str]:
        """The nodes the graph runs next: none from a checkpoint holding only the state's own
        channels and no pending write, else UNKNOWN."""
        found = self.saver.get_tuple(config(session_id))
        if found is None:
            return []
        if (
            found.pending_writes
            or not set(found.checkpoint["channel_values"]) <= LoopState.model_fields.keys()
        ):
            return UNKNOWN
        return []

    def checkpoint_status(self, session_id: str) -> tuple[str | None, str | None, dict, list[str]]:
        """`Checking.status` of the latest checkpoint and the nodes run next, or UNKNOWN."""
        digest, why, upcoming = self.saver.status(config(session_id))  # type: ignore[attr-defined]
        if unknown(after := self.next_nodes(session_id)):
            return UNKNOWN
        return digest, why, upcoming, after


def lineage(found: Iterable[Step]) -> list[Step]:
    """A thread's checkpoints (listed newest first, as `CheckpointTuple`s or the graph's
    `StateSnapshot`s) from its first to its latest, following parents from the newest: a session
    that went back to a launch has abandoned checkpoints in its history, which are left out."""
    listed = list(found)
    if not listed:
        return []
    by_id = {f.config["configurable"]["checkpoint_id"]: f for f in listed}
    chain, at = [], listed[0]
    while True:
        chain.append(at)
        parent = at.parent_config
        nxt = by_id.get(parent["configurable"]["checkpoint_id"]) if parent else None
        if nxt is None:
            return chain[::-1]
        at = nxt
