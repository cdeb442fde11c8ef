"""The sessions of a store as `show`, `report` and `replay` read them, LangGraph loaded only when a
session needs it (issue 63): its index row, whether the checkpointer holds any checkpoint of it (its
table read directly), and the states of one that has none here (an imported recording) from its
replay kept by `replayed.py`. A replay runs in memory without a checkpointer (replaying.py). A
session with checkpoints is read from the checkpointer alone (direct.py), or, where only the graph
can tell, through `Sessions` (runner.py: the graph and its checkpointer), each opened on first
need; `Sessions` is a `StoredSessions` that has them open.

Light: the store and the state models; never LangGraph, the graph or the checkpointer at its top."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.sessions.reading import replayed
from tools.errors import ConfigError
from tools.paths import inside
from tools.paths import session_id as checked_id
from tools.store.db import describe as describe_store
from tools.store.sessions import SessionStore, perfloop_home

if TYPE_CHECKING:
    from agent.sessions.reading.direct import Direct
    from state.sessions.loop import LoopState
    from state.sessions.session import SessionInfo, Summary


class StoredSessions:
    """The sessions of this store ($PERFLOOP_STORE's database, else SQLite under $PERFLOOP_HOME):
    their index, recordings and states. Session folders stay under $PERFLOOP_HOME."""

    def __init__(
        self,
        home: Path | None = None,
        store: SessionStore | None = None,
        graphed: Callable[[StoredSessions], StoredSessions] | None = None,
    ) -> None:
        """`graphed`: opens these sessions with the graph and its checkpointer (runner.Sessions;
        the caller passes it, so this module never imports the runner)."""
        self.home = home or perfloop_home()
        self.store = store or SessionStore.open(self.home)
        self._open_graph = graphed
        self._graphed: StoredSessions | None = None
        self._direct: Direct | None = None

    def where(self) -> str:
        """The store, for messages (no password)."""
        return describe_store(self.store.url, self.home)

    def session_dir(self, session_id: str) -> Path:
        """The session's folder under $PERFLOOP_HOME (its id checked, the result inside home)."""
        return inside(self.home / "sessions" / checked_id(session_id), [self.home], "session folder")

    def info(self, session_id: str) -> SessionInfo:
        if (info := self.store.get_session(checked_id(session_id))) is None:
            raise ConfigError(
                f"no session {session_id!r} in {self.where()}; list them with `perfloop sessions`"
            )
        return info

    def graphed(self) -> StoredSessions:
        """These sessions with the graph and its checkpointer (LangGraph loaded then, once)."""
        if self._graphed is None:
            if self._open_graph is None:
                raise ConfigError(f"the sessions of {self.where()} were opened without the graph")
            self._graphed = self._open_graph(self)
        return self._graphed

    def direct(self) -> Direct:
        """The checkpointer read without the graph (direct.py; opened once, LangGraph's savers loaded then)."""
        if self._direct is None:
            from agent.sessions.checkpoint import open_checkpointer
            from agent.sessions.reading.direct import Direct

            self._direct = Direct(open_checkpointer(self.home, self.store.url, self.store))
        return self._direct

    def read(self, what: str, session_id: str) -> Any:
        """`what` (a method of `Direct` and of `Sessions`) of a session with checkpoints: read
        without the graph, else (direct.py could not tell) through it; by `Sessions`, which has
        the graph open (and pins what it verified), through it alone."""
        from agent.sessions.reading.direct import unknown

        sid = checked_id(session_id)
        if self._graphed is self:
            return getattr(self, what)(sid)
        if unknown(found := getattr(self.direct(), what)(sid)):
            return getattr(self.graphed(), what)(sid)
        return found

    def checkpointed(self, session_id: str) -> bool:
        """Whether the checkpointer holds any checkpoint of the session, read in its table without
        LangGraph; True when that cannot be told (then LangGraph reads it, as for one that has)."""
        sid, sql = checked_id(session_id), "SELECT 1 FROM checkpoints WHERE thread_id = ? LIMIT 1"
        if self.store.url is not None:  # LangGraph's PostgresSaver: its tables in the store's database
            try:
                return bool(self.store.db.rows(sql, (sid,)))
            except self.store.db.errors:
                return True
        path = self.home / "checkpoints.sqlite"
        if not path.is_file():
            return False  # no checkpoint written here yet
        try:
            with closing(sqlite3.connect(path, timeout=30)) as db:
                return bool(db.execute(sql, (sid,)).fetchall())
        except sqlite3.Error:
            return True

    def has_state(self, session_id: str) -> bool:
        """Whether the session's latest checkpoint holds a state (else its states are its replay's)."""
        return self.checkpointed(session_id) and bool(self.read("has_state", session_id))

    def no_checkpoints(self, session_id: str) -> ConfigError:
        """The error of reading the state of a session without checkpoints here."""
        return ConfigError(
            f"session {session_id} has no checkpoints in {self.where()} (imported?); "
            f"use `perfloop replay {session_id}`"
        )

    def state(self, session_id: str) -> LoopState:
        """The session's state at its latest checkpoint (ConfigError when it has none here)."""
        if not self.checkpointed(session_id):
            raise self.no_checkpoints(session_id)
        if (found := self.read("state", session_id)) is None:
            raise self.no_checkpoints(session_id)
        return found

    def history(self, session_id: str) -> list[LoopState]:
        """Every state the session went through, oldest first: from its checkpoints, or, for an
        imported recording (no checkpoints here), from its replay (kept, else run in memory)."""
        if not self.checkpointed(session_id):
            return self.replayed_history(session_id)
        return self.read("history", session_id)

    def replayed_history(self, session_id: str, last: bool = False) -> list[LoopState]:
        """The states of the recording's replay: kept ones (`last`: the latest alone), else those
        of a replay run now in memory (no host touched), then kept unless it diverged."""
        made = replayed.key(self.store, session_id)
        if (kept := replayed.read(self.home, session_id, made, last)) is not None:
            return kept
        states = self.replay_states(session_id, made)
        return states[-1:] if last else states

    def replay_states(self, session_id: str, made: str | None = None) -> list[LoopState]:
        """The states of a replay of the recording run now in memory (no host touched, no
        checkpointer: replaying.py, LangGraph and the graph loaded here), oldest first; kept
        under the key `made` unless it diverged."""
        from agent.sessions.reading.replaying import run

        return run(self.store, self.home, session_id, made)[0]

    def replay(self, session_id: str, kept: bool = False) -> tuple[LoopState, Summary]:
        """Run the graph again with every tool call answered from the recording (replaying.py;
        `kept`: its states kept for `show`, `report` and `replay` unless it diverged): its last
        state and its summary."""
        from agent.sessions.reading.replaying import replay

        return replay(
            self.store, self.home, session_id, replayed.key(self.store, session_id) if kept else None
        )

    def replay_or_read(self, session_id: str, again: bool = False) -> tuple[LoopState, Summary, bool]:
        """`perfloop replay`: the last state and summary of the replay kept under the key it would
        run with now (the same recording, perfloop sources, Python and libraries: running the graph
        again cannot decide otherwise), read back without LangGraph (True); else, or with `again`,
        those of the graph run now, its states kept (False). ReplayDivergence when it diverges."""
        made = replayed.key(self.store, session_id)
        if not again and (kept := replayed.outcome(self.home, session_id, made)) is not None:
            return *kept, True
        return *self.replay(session_id, kept=True), False

    def last_state(self, session_id: str) -> LoopState:
        """`history(session_id)[-1]`, the latest state alone read when it was kept."""
        if not self.checkpointed(session_id):
            return self.replayed_history(session_id, last=True)[-1]
        return self.read("history", session_id)[-1]

    def summary(self, info: SessionInfo, state: LoopState) -> Summary:
        """The session's summary: its row's, else (a session running now) its `state`'s."""
        if info.summary is not None:
            return info.summary
        from agent.sessions.summary import summarize  # the loop's rules: loaded for that one alone

        return summarize(state, info.status)

    def checkpoint_status(self, session_id: str) -> tuple[str | None, str | None, dict, list[str]]:
        """(the digest `--trust` takes, why its checkpoint is not this key's or None, its pending
        tasks and writes, its next nodes) for `show` (`Checking.status`); none without checkpoints."""
        if not self.checkpointed(session_id):
            return None, "no checkpoint", {"tasks": [], "writes": []}, []
        return self.read("checkpoint_status", session_id)

    def pending_approval(self, session_id: str) -> dict | None:
        """The approval request a paused session waits on, if any (none without a checkpoint)."""
        if not self.checkpointed(session_id):
            return None
        return self.read("pending_approval", session_id)
