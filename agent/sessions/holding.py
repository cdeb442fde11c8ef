"""A checkout one session holds is not another's: a new session on a repo that a running, paused
or interrupted session works on (here, or from another machine using the same store) is refused
in one line naming that session, which `perfloop resume` continues or `perfloop abandon` gives up.

The holder is found from the store (a session not ended whose repo is this one, on this machine)
and from the repo itself (a session branch checked out, or the dormant profiler's marked lines in
a tracked file): a session recorded in another store, or killed before its record, still shows.

`abandon` puts the checkout back as the session found it: its servers stopped, its
instrumentation removed (the file's hash verified), the branch it started on checked out again
(the session branch kept only if it holds commits), the user's uncommitted changes carried along;
the session is marked `abandoned`. Like the clean-up after a signal, it runs the tools directly,
not through the door: it is not a step of the loop.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from agent.sessions.interrupts import run_tool, stop_servers
from agent.sessions.remote import executor_for, host_executors
from agent.sessions.runner import Sessions
from state.config.target import TargetConfig
from state.door.calls import LeaveBranchArgs, RemoveInstrumentationArgs
from state.sessions.session import SessionInfo
from tools.errors import ConfigError
from tools.store.sessions import SessionStore
from tools.workspace import repo
from tools.workspace.commands import SESSION_BRANCH_PREFIX
from tools.workspace.instrumentation import MARKER_ID

HELD = ("running", "paused", "interrupted")
"""Statuses of a session that still holds its checkout."""


def _git(path: object, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _what_to_do(info: SessionInfo) -> str:
    go_on = (
        f"`perfloop approve {info.id}` or `perfloop reject {info.id}`"
        if info.status == "paused"
        else f"`perfloop resume {info.id}`"
    )
    return f"continue it with {go_on}, or give the checkout back with `perfloop abandon {info.id}`"


def holder_line(store: SessionStore, target: TargetConfig, where: str) -> str | None:
    """Why a new session may not start on the target's checkout (one line), or None (local
    targets; a remote checkout is checked by the session on its host's store)."""
    checkout = target.repo
    if target.host.kind != "local" or not checkout.is_dir():
        return None
    here, held = socket.gethostname(), store.held()
    for info in store.list_sessions():
        if info.status in HELD and info.repo == checkout and info.host in (None, here):
            by = f", run by {held[info.id]}" if info.id in held else ""
            return f"{checkout} is held by session {info.id} ({info.status}{by}); {_what_to_do(info)}"
    branch = _git(checkout, "rev-parse", "--abbrev-ref", "HEAD")
    owner = None
    if branch.startswith(SESSION_BRANCH_PREFIX):
        sid = branch.removeprefix(SESSION_BRANCH_PREFIX)
        owner = store.get_session(sid)
        if owner is None:
            return (
                f"{checkout} is on branch {branch} of a perfloop session not in {where}; "
                f"continue or abandon it with the store it ran on (PERFLOOP_STORE)"
            )
        if owner.status in HELD:
            on = f" on {owner.host}" if owner.host and owner.host != here else ""
            return f"{checkout} is held by session {owner.id} ({owner.status}{on}); {_what_to_do(owner)}"
    marked = _git(checkout, "grep", "-l", "-E", f"# {MARKER_ID}$")
    if marked:
        first = marked.splitlines()[0]
        return (
            f"{checkout} has a perfloop session's profiler instrumentation in {first}; "
            "`perfloop sessions` lists the sessions, `perfloop abandon ID` gives the checkout back"
        )
    return None


def refuse_if_held(store: SessionStore, target: TargetConfig, where: str) -> None:
    """ConfigError (one line, nothing written) when another session holds the checkout."""
    line = holder_line(store, target, where)
    if line is not None:
        raise ConfigError(line)


def abandon(sessions: Sessions, session_id: str) -> str:
    """Give the checkout of a session not ended back as it was found, and mark the session
    abandoned; returns what was done (one line; what could not be done is named in it)."""
    info = sessions.info(session_id)
    if info.status not in HELD:
        raise ConfigError(
            f"session {session_id} is {info.status}: only a running, paused or interrupted session "
            "can be abandoned"
        )
    problems: list[str] = []
    with sessions.lock(session_id):  # refused while a process runs it
        state = sessions.state(session_id)
        files = state.options.session_dir
        with executor_for(state.target, files) as ex:
            problems += stop_servers(state, ex, host_executors(files))
            steps: list[tuple[str, Callable[[Any], BaseModel], BaseModel]] = []
            if state.instrumentation is not None:
                rm = RemoveInstrumentationArgs(repo=state.target.repo, record=state.instrumentation)
                steps.append(("remove instrumentation", repo.remove_instrumentation, rm))
            if state.branch and state.start is not None:
                back = LeaveBranchArgs(
                    repo=state.target.repo,
                    name=state.branch,
                    back_to=state.start.branch,
                    head_sha=state.start.head_sha,
                )
                steps.append(
                    (f"back to {state.start.branch or state.start.head_sha[:10]}", repo.give_back, back)
                )
            for what, fn, args in steps:
                try:
                    run_tool(ex, fn, args)
                except Exception as exc:
                    problems.append(f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        sessions.store.put_session(sessions.info(session_id).model_copy(update={"status": "abandoned"}))
    start = state.start.branch if state.start else None
    done = f"session {session_id} abandoned; {state.target.repo} is back on {start or 'its starting commit'}"
    return done + (f" (not all: {'; '.join(problems)})" if problems else "")
