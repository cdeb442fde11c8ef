"""Starting, resuming, replaying and inspecting sessions: the checkpointed graph + the session store."""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.context import LoopContext
from agent.graph import compile_graph
from agent.sessions.binding import check_target
from agent.sessions.checkpoint import open_checkpointer
from agent.sessions.interrupts import running_lines, settled, stopped_after
from agent.sessions.reading.replaying import lineage, pending, states, thread
from agent.sessions.reading.stored import StoredSessions
from agent.sessions.remote import close_hosts, executor_for, host_executors, remote_options
from agent.sessions.revive import forked, repo_missing_here, resume_point, spawned
from agent.sessions.summary import summarize as summarize_session
from agent.steps.setup import FORK_STEPS
from state.base import utcnow
from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.sessions.loop import LoopState
from state.sessions.session import SessionInfo
from tools import interrupts, progress
from tools.door.live import LiveDoor
from tools.errors import ConfigError, StoreUnreachable
from tools.hosts.client import RemoteExecutor
from tools.interrupts import Interrupted
from tools.paths import session_id as checked_id
from tools.store.lease import SessionBusy, hold
from tools.store.sessions import SessionStore


def new_session_id() -> str:
    """Sortable, unique: `20261129-101500-a1b2`."""
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


__all__ = ["SessionBusy", "Sessions", "new_session_id", "thread"]


class Sessions(StoredSessions):
    """The sessions of this store ($PERFLOOP_STORE's database, else SQLite under $PERFLOOP_HOME):
    their index, recordings, checkpoints and graph. Session folders stay under $PERFLOOP_HOME."""

    trust: str | None = None
    """`--trust DIGEST`: run a session not signed by this user's key if it holds that (signing.py)."""

    def __init__(self, home: Path | None = None, store: SessionStore | None = None) -> None:
        super().__init__(home, store)
        self.graph = compile_graph(open_checkpointer(self.home, self.store.url, self.store))
        self._graphed = self

    def start(
        self,
        target: TargetConfig,
        options: dict[str, Any],
        session_id: str,
        target_path: Path | None,
        parent: str | None = None,
    ) -> LoopState:
        """Record a new session and run the loop until it ends or pauses for approval."""
        opts = LoopOptions(
            session_dir=self.session_dir(session_id), **{**options, **remote_options(target, session_id)}
        )
        inp = LoopState(session_id=session_id, target=target, options=opts)
        return self.start_from(inp, target_path, parent)

    def start_from(self, inp: LoopState, target_path: Path | None, parent: str | None = None) -> LoopState:
        """Record a session whose initial state is `inp`, then run it."""
        sid = inp.session_id
        for line in running_lines(self.home, self.store.held()):
            print(line, file=sys.stderr)  # e.g. GPU memory another session's server still holds
        self.store.put_session(
            SessionInfo(
                id=sid,
                created_at=utcnow(),
                target_name=inp.target.name,
                target_path=target_path,
                repo=inp.target.repo,
                status="running",
                parent=parent,
                host=socket.gethostname(),
            )
        )
        self.store.add_input(sid, "initial", inp.model_dump(mode="json"))
        return self._invoke(sid, inp)

    def resume(self, session_id: str, answer: dict | None = None) -> LoopState:
        """Continue a session from its last checkpoint (with an approval answer if paused)."""
        self.info(session_id)
        if answer is not None:
            return self._invoke(session_id, Command(resume=answer), answer=answer)
        return self._invoke(session_id, None)

    def config(self, session_id: str) -> RunnableConfig:
        return thread(session_id)

    def has_state(self, session_id: str) -> bool:
        return bool(self.graph.get_state(self.config(checked_id(session_id))).values)

    def state(self, session_id: str) -> LoopState:
        snap = self.graph.get_state(self.config(checked_id(session_id)))
        if not snap.values:
            raise self.no_checkpoints(session_id)
        return LoopState.model_validate(snap.values)

    def finished_tasks(self, session_id: str, config: RunnableConfig | None = None) -> set[str]:
        """Tasks of the checkpoint's next step that already finished (a parallel batch killed
        mid-way, whose writes LangGraph keeps and does not run again): those with a `result`."""
        snap = self.graph.get_state(config or self.config(checked_id(session_id)))
        return {t.id for t in snap.tasks if t.result is not None}

    def checkpoint_status(self, session_id: str) -> tuple[str | None, str | None, dict, list[str]]:
        """StoredSessions.checkpoint_status, read through the checkpointer (`Checking.status`)."""
        if not self.checkpointed(session_id):
            return super().checkpoint_status(session_id)
        cfg = self.config(session_id)
        saver: Any = self.graph.checkpointer
        return (*saver.status(cfg), list(self.graph.get_state(cfg).next))

    def pending_approval(self, session_id: str) -> dict | None:
        """The approval request a paused session waits on, if any."""
        return pending(self.graph, self.config(checked_id(session_id)))

    @contextmanager
    def lock(self, session_id: str) -> Iterator[None]:
        """Hold the session's lease: a second process running the same session, on this machine or
        any other using the store, is refused (`tools/store/lease.py`)."""
        with hold(self.store.db, checked_id(session_id), self.home):
            yield

    def verify(self, session_id: str, config: RunnableConfig | None = None) -> RunnableConfig | None:
        """Refuse a checkpoint this user's key did not sign (`--trust` for one shown) before anything
        runs, and pin it (trust/saver.py): its config with its id (None: no state yet)."""
        return self.graph.checkpointer.verify(config or self.config(checked_id(session_id)), self.trust)  # type: ignore[union-attr]

    def _invoke(self, session_id: str, inp: Any, answer: dict | None = None) -> LoopState:
        with self.lock(session_id):
            pinned = None if isinstance(inp, LoopState) else self.verify(session_id)
            known = inp if isinstance(inp, LoopState) else self.state(session_id)
            check_target(self.session_dir(session_id), known, new=isinstance(inp, LoopState))
            info = self.info(session_id)
            if repo_missing_here(inp, known):  # refused before anything is written
                raise ConfigError(
                    f"session {session_id} works on {known.target.repo}, which is not on this machine "
                    f"(it last ran on {info.host or 'another machine'}); resume or approve it there"
                )
            running = {"status": "running", "host": socket.gethostname()}
            self.store.put_session(info.model_copy(update=running))
            try:  # the head still the checkpoint verified (a peer may write when it reads `running`)
                _ = pinned and self.state(session_id)
            except ConfigError:  # nothing else was written
                self.store.put_session(info)
                raise
            if answer is not None:
                self.store.add_input(session_id, "answer", answer)
            progress.keep_in(known.options.session_dir)  # for the approval page (perfloop serve)
            try:
                with interrupts.catching(), executor_for(known.target, known.options.session_dir) as ex:
                    self._run(session_id, inp, known, ex, pinned)
            except (Interrupted, Exception) as exc:  # every ending but the loop's own: left resumable
                if not isinstance(exc, StoreUnreachable):  # (then its status cannot be written)
                    with suppress(Exception):  # a store that is down must not hide why it ended
                        self.store.put_session(info)  # as it was (a store changed under it: stays so)
                        status = "paused" if self.pending_approval(session_id) is not None else "interrupted"
                        self.store.put_session(self.info(session_id).model_copy(update={"status": status}))
                raise
            finally:
                progress.keep_in(None)
                close_hosts()  # the [[hosts]] connections
            state = self.state(session_id)
            status = "paused" if self.pending_approval(session_id) is not None else state.status
            calls = self.store.tool_calls(session_id, include_superseded=True)  # cut attempts' launches
            summary = summarize_session(state, status, calls) if status != "running" else None
            update = {"status": status, "summary": summary, "host": socket.gethostname()}
            self.store.put_session(self.info(session_id).model_copy(update=update))
            return state

    def _run(
        self, session_id: str, inp: Any, known: LoopState, executor: RemoteExecutor | None, pinned: Any = None
    ) -> None:
        """Invoke the graph: an answer from the `pinned` checkpoint, a resume from its head (refused
        unless pinned) once its server is checked (`revive.py`); stopped servers on any exception."""
        config = pinned if isinstance(inp, Command) and pinned else self.config(session_id)
        executors = host_executors(known.options.session_dir)
        try:
            if inp is None or isinstance(inp, Command):
                if inp is None:
                    config, known, why = resume_point(self.graph, config, executor)
                    if why is not None:
                        self.verify(session_id, config)  # the earlier checkpoint it goes back to
                        print(why, file=sys.stderr)
                done = self.finished_tasks(session_id, config)
                self.store.supersede_after(session_id, known.calls_done, done, spawned(known))
            door = LiveDoor(session_id, self.store, executor, executors)
            self.graph.invoke(inp, config, context=LoopContext(door=door), durability="sync")
            paused = self.pending_approval(session_id) is not None  # no GPU held while a human reads
            settled(self.state(session_id), paused, executor, executors)  # or after the end
        except (Interrupted, Exception) as exc:  # a signal, a bug, a library's or a tool's error
            stopped_after(exc, known, executor, executors)
            raise

    def fork(self, session_id: str, at: str, new_id: str, approve: str | None) -> LoopState:
        """Start a new session from the parent's checkpoint before step `at` (`STEP` or `STEP#N`)."""
        step, _, nth = at.partition("#")
        if step not in FORK_STEPS:
            raise ConfigError(f"cannot fork at {step!r}; fork at one of: {', '.join(FORK_STEPS)}")
        with self.lock(session_id):  # its checkpoints must not move while they are read
            self.verify(session_id)
            info = self.info(session_id)
            if info.status in ("running", "paused", "interrupted"):
                raise ConfigError(
                    f"session {session_id} is {info.status}; fork it once it has ended "
                    f"(approve/reject or resume it first)"
                )
            history = lineage(self.graph, self.config(session_id))
        hits = [snap for snap in history if snap.next == (step,)]
        n = int(nth or 1)
        if len(hits) < n:
            raise ConfigError(
                f"session {session_id} reached {step} {len(hits)} time(s); there is no {step}#{n} to fork at"
            )
        self.verify(session_id, hits[n - 1].config)  # the checkpoint it forks from, too
        inp = forked(
            LoopState.model_validate(hits[n - 1].values), step, new_id, self.session_dir(new_id), approve
        )
        return self.start_from(inp, info.target_path, parent=session_id)

    def history(self, session_id: str) -> list[LoopState]:
        """Every state the session went through, oldest first: from its checkpoints, or, for an
        imported recording (no checkpoints here), from its replay (kept, else run in memory)."""
        cfg = self.config(checked_id(session_id))
        if not self.graph.get_state(cfg).values:
            return self.replayed_history(session_id)
        return states(self.graph, cfg)
