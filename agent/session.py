"""Starting, resuming and inspecting sessions: the checkpointed graph plus the session store."""

from __future__ import annotations

import secrets
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from langgraph.types import Command

import tools.bench  # noqa: F401  (registers tools)
import tools.profiling  # noqa: F401
import tools.repo  # noqa: F401
import tools.server  # noqa: F401
from agent.checkpoint import open_checkpointer
from agent.context import LoopContext
from agent.graph import compile_graph
from state.loop import LoopOptions, LoopState
from state.session import SessionInfo, Summary
from state.target import TargetConfig
from tools.door import Door
from tools.errors import ConfigError
from tools.store import SessionStore, perfloop_home, utcnow


def new_session_id() -> str:
    """Sortable, unique: `20261129-101500-a1b2`."""
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


class Sessions:
    """The sessions under $PERFLOOP_HOME: their store, checkpoints and graph."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = home or perfloop_home()
        self.store = SessionStore(self.home / "sessions.sqlite")
        self.graph = compile_graph(open_checkpointer(self.home))

    def session_dir(self, session_id: str) -> Path:
        return self.home / "sessions" / session_id

    def start(self, target: TargetConfig, options: dict[str, Any], session_id: str,
              target_path: Path | None) -> LoopState:
        """Record a new session and run the loop until it ends or pauses for approval."""
        opts = LoopOptions(session_dir=self.session_dir(session_id), **options)
        self.store.put_session(SessionInfo(
            id=session_id, created_at=utcnow(), target_name=target.name, target_path=target_path,
            repo=target.repo, status="running"))
        inp = LoopState(session_id=session_id, target=target, options=opts)
        return self._invoke(session_id, inp)

    def resume(self, session_id: str, answer: dict | None = None) -> LoopState:
        """Continue a session from its last checkpoint (with an approval answer if paused)."""
        self.info(session_id)
        return self._invoke(session_id, None if answer is None else Command(resume=answer))

    def info(self, session_id: str) -> SessionInfo:
        info = self.store.get_session(session_id)
        if info is None:
            raise ConfigError(f"no session {session_id!r} in {self.home}; list them with `perfloop sessions`")
        return info

    def config(self, session_id: str) -> dict:
        return {"configurable": {"thread_id": session_id}}

    def state(self, session_id: str) -> LoopState:
        snap = self.graph.get_state(self.config(session_id))
        return LoopState.model_validate(snap.values)

    def pending_approval(self, session_id: str) -> dict | None:
        """The approval request a paused session waits on, if any."""
        snap = self.graph.get_state(self.config(session_id))
        for task in snap.tasks:
            for intr in task.interrupts:
                return intr.value
        return None

    def _invoke(self, session_id: str, inp: Any) -> LoopState:
        door = Door(session_id, self.store)
        self.graph.invoke(inp, self.config(session_id), context=LoopContext(door=door, python=sys.executable),
                          durability="sync")
        state = self.state(session_id)
        paused = self.pending_approval(session_id) is not None
        status = "paused" if paused else state.status
        info = self.info(session_id)
        summary = summarize(state, status) if status != "running" else None
        self.store.put_session(info.model_copy(update={"status": status, "summary": summary}))
        return state


def summarize(state: LoopState, status: str) -> Summary:
    """The session's outcome (pure)."""
    before, after = state.baseline, state.reference
    rejected = [d.playbook for d in state.decisions if d.verdict != "accepted"]
    return Summary(
        session=state.session_id, status=status,
        tpot_ms_before=before.tpot_ms.median if before else None,
        tpot_ms_after=after.tpot_ms.median if after else None,
        speedup=before.tpot_ms.median / after.tpot_ms.median if before and after else None,
        ttft_ms_before=before.ttft_ms.median if before else None,
        ttft_ms_after=after.ttft_ms.median if after else None,
        outputs_identical=after.outputs == before.outputs if before and after else None,
        accepted=[c.trailers.get("Perfloop-Playbook", "?") for c in state.accepted],
        rejected=rejected, commits=[c.sha for c in state.accepted], branch=state.branch,
        server_launches=state.launches, profile_method=state.target.profile.method,
        iterations=len(state.profiles), stop_reason=state.stop_reason or state.error or "",
        repo=state.target.repo)
