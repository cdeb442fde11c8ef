"""`resume` never trusts a server it did not just check; `forked`, the initial state of a fork.

A session stopped by a signal (its servers stopped on the way out), by SIGKILL, a crash or a
reboot may come back to a step that talks to the server the state records (`NEEDS_SERVER`) while
that server is gone. Before such a session continues, the recorded server is checked (its process
group and health endpoint, on its host, not through the door); when it is not healthy the session
goes back to the checkpoint before the step that launched it (`launch`, `relaunch`, `reconcile`),
which launches it again from the recorded tree. The calls made since that checkpoint are then
superseded like a killed attempt's, so the recording still replays straight through.

Every other server of the session still running on its host is stopped before it continues: what
the killed attempt spawned (a reference beside the candidate, a launch SIGKILLed before its pid
file), found by the mark in its environment (`server.stop_marked`), recorded or not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import StateSnapshot

from agent.context import host_dir
from agent.graph import Graph
from agent.sessions.interrupts import run_tool, unrecorded
from agent.sessions.reading.replaying import lineage
from state.door.calls import ServerArgs, ServerStatus
from state.sessions.loop import LoopState
from tools import server
from tools.door.live import Executor
from tools.server import mark_of

NEEDS_SERVER = frozenset({"baseline", "profile", "measure", "decide"})
"""Steps that talk to the recorded server (`decide` leads to `profile` with it)."""


def _pid(values: dict[str, Any]) -> int | None:
    handle = values.get("server")
    if handle is None:
        return None
    process = handle["process"] if isinstance(handle, dict) else handle.process
    return int(process["pid"] if isinstance(process, dict) else process.pid)


def healthy(state: LoopState, executor: Executor | None) -> bool:
    """Whether the state's server runs and answers its health endpoint, checked now."""
    if state.server is None:
        return True
    status = run_tool(executor, server.status, ServerArgs(server=state.server))
    return ServerStatus.model_validate(status.model_dump()).healthy


def launch_point(graph: Graph, config: RunnableConfig) -> StateSnapshot | None:
    """The latest checkpoint before the recorded server was launched (its `next` is the step
    that launched it), or None when the server is not from this thread's history."""
    history = lineage(graph, config)[::-1]
    if not history or (pid := _pid(history[0].values)) is None:
        return None
    for snap in history[1:]:
        if _pid(snap.values) != pid:
            return snap
    return None


def resume_point(
    graph: Graph, config: RunnableConfig, executor: Executor | None
) -> tuple[RunnableConfig, LoopState, str | None]:
    """Where a resumed session continues: (config, its state, what was done about its servers,
    or None), every server of the session but the one it continues with stopped first."""
    config, state, why = _continue_at(graph, config, executor)
    kept = state.server
    keep = None if kept is None else mark_of(kept.pid_file, kept.process.log_path, kept.launch_number)
    if stopped := unrecorded(state, executor, keep):
        left = f"stopped the killed attempt's servers that still ran (pids {', '.join(map(str, stopped))})"
        why = f"{why}; {left}" if why else left
    return config, state, why


def _continue_at(
    graph: Graph, config: RunnableConfig, executor: Executor | None
) -> tuple[RunnableConfig, LoopState, str | None]:
    snap = graph.get_state(config)
    state = LoopState.model_validate(snap.values)
    if not NEEDS_SERVER & set(snap.next) or healthy(state, executor):
        return config, state, None
    back = launch_point(graph, config)
    if back is None:
        return config, state, None
    handle = state.server
    assert handle is not None
    why = (
        f"server #{handle.launch_number} (pid {handle.process.pid}) is not running; "
        f"going back to {', '.join(back.next)} to launch it again"
    )
    return back.config, LoopState.model_validate(back.values), why


def spawned(state: LoopState) -> int:
    """The highest launch number past `state`'s count that a pid file of the session names on a
    local target (a launch killed before its call was recorded: the pid file names its number
    before the server starts), else 0."""
    if state.target.host.kind != "local":
        return 0  # on an SSH host the recorded calls alone tell: a launch killed before its
        # record there is made again under its number (`launch #N (again)`, tools/server.py)
    numbers = [0]
    for pid_file in host_dir(state).glob("*.pid"):
        try:
            numbers.append(int(json.loads(pid_file.read_text())["launch_number"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return max(numbers) if max(numbers) > state.launches else 0


def repo_missing_here(inp: Any, known: LoopState) -> bool:
    """A resumed session on a local target whose repo is not on this machine (a new session, or
    one stopped before `prepare` made the demo's repo, has none yet by design)."""
    resumed = not isinstance(inp, LoopState) and known.transitions
    return bool(resumed) and known.target.host.kind == "local" and not known.target.repo.is_dir()


def forked(parent: LoopState, step: str, new_id: str, session_dir: Path, approve: str | None) -> LoopState:
    """A new session `new_id` starting at `step` from `parent` (a signed checkpoint's state)."""
    options = parent.options.model_copy(
        update={
            "session_dir": session_dir,
            "demo_source": None,
            "host_dir": parent.options.host_dir and parent.options.host_dir.parent / new_id,
            **({"approve": approve} if approve else {}),
        }
    )
    return parent.model_copy(
        update={
            "session_id": new_id,
            "options": options,
            "fork_at": step,
            "seed_session": parent.seed_session or parent.session_id,  # the reference's prompts
            "server": None,
            "instrumentation": None,
            "pending_commit": None,
            "launches": 0,
            "transitions": [],
            "calls_done": 0,
            "status": "running",
        }
    )
