"""How a command that ran a session ends: its approval request or summary, and a first launch's
failure as one line.

A command's body runs inside `run_command` (agent/cli/running.py): bad input (a `ToolError`, or a
usage error) prints one line on stderr and exits 2; a bug prints one line and exits 3
(PERFLOOP_DEBUG=1 shows the traceback); a failed session exits 1, but one whose first launch failed
(a port in use, a server that exits at once: the environment's problem, nothing measured) ends like
bad input, one line and exit 2. This module imports the loop (the session store, LangGraph): a
command imports it inside its body, never at start-up (agent/cli/__init__.py).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import typer

from agent.cli import render
from agent.cli.asking import ask, interactive
from agent.cli.output import console, emit
from agent.cli.running import status_line
from agent.report.headline import headline_json, summary_json
from agent.sessions.approving import answer_session
from agent.sessions.diffs import keep, proposal_diffs
from agent.sessions.runner import Sessions
from agent.sessions.summary import first_launch_failure
from state.sessions.loop import LoopState
from tools.errors import ServerError
from tools.hosts.listeners import holders


def finish(sessions: Sessions, state: LoopState, as_json: bool, workspace: Path | None = None) -> None:
    """Show where a session stands (approval request or summary; with `--json` on stderr, and the
    summary as one JSON document on stdout); keep each proposal's diff in the session folder.

    A session that failed at its first launch, leaving nothing behind, ends as bad input does:
    one line on stderr and exit 2 (with `--json`, its summary still the one document on stdout);
    `workspace` (the demo's copy of its server) is removed then."""
    keep(sessions.session_dir(state.session_id), proposal_diffs(sessions.history(state.session_id)))
    status_line(False)  # no spinner frame left before the table or the question
    pending = sessions.pending_approval(state.session_id)
    info = sessions.info(state.session_id)
    if (failure := first_launch_failure(state)) is not None and pending is None:
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)
            with contextlib.suppress(OSError):
                workspace.parent.rmdir()  # `workspaces/` when it held only this one
        if as_json:
            emit(summary_json(info.summary) if info.summary else {"session": state.session_id})
        raise ServerError(launch_failure_line(state, failure))
    if pending is not None:
        render.approval(console(as_json), pending)
        if interactive(as_json):  # a person at a terminal: asked in place
            answer = ask(console(as_json), pending, sessions.session_dir(state.session_id))
            if answer is not None:
                status_line(True)
                state = answer_session(sessions, state.session_id, answer, pending.get("digest"))
                return finish(sessions, state, as_json, workspace)
    elif info.summary is not None:
        render.summary(console(as_json), info.summary)
    if as_json:
        payload = summary_json(info.summary) if info.summary else {"session": state.session_id}
        payload["status"] = info.status
        payload["headline"] = headline_json(info.summary, state.session_id, info.status)
        emit(payload)
    if info.status == "failed":
        raise typer.Exit(1)


def launch_failure_line(state: LoopState, failure: str) -> str:
    """The one line a first launch's failure ends with: what failed (the server's last log line, or
    the port) and what to do (pure but for reading which processes hold a local fixed port)."""
    port = state.target.launch.port
    held = holders(port) if port and state.target.host.kind == "local" else []
    if "launch.port = 0" in failure:  # the failure says what to do with the port already
        todo = "then run again"
    elif held:
        who = ", ".join(map(str, held))
        todo = f"launch.port {port} is in use by process {who}: stop it or set launch.port = 0"
    else:
        todo = "fix what its log says (the launch command, or what the server needs here) and run again"
    return (
        f"the server failed at its first launch: {failure}; {todo} "
        f"(nothing measured or left running, the repo as found; session {state.session_id})"
    )
