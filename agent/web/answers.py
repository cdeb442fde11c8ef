"""Answering a paused session from the approval page: each proposal is answered once (a claim file
made with O_EXCL, so two tabs or two requests at once get one answer and one refusal), and the
answer runs as the same `perfloop approve|reject` command a shell would run, in its own process
that continues the session in the background."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from agent.sessions.approving import approval_number, batch_refusal
from agent.sessions.runner import Sessions
from tools.errors import ToolError


class Conflict(Exception):
    """The proposal was answered already, or the session waits on no (or another) proposal."""


_children: list[subprocess.Popen] = []
_lock = threading.Lock()


def web_dir(sessions: Sessions, session: str) -> Path:
    """The session's folder for the page's files: claims, edited patches, the answers' logs."""
    path = sessions.session_dir(session) / "web"
    path.mkdir(parents=True, exist_ok=True)
    return path


def check(sessions: Sessions, session: str, number: int) -> None:
    """Conflict unless approval `number` is the one the session waits on and is not answered yet."""
    if claimed(sessions, session, number):
        raise Conflict(f"proposal {number + 1} of session {session} was answered already")
    waiting = approval_number(sessions, session)
    if waiting is None:
        raise Conflict(
            f"session {session} is not waiting for approval (status {sessions.info(session).status})"
        )
    if waiting != number:
        raise Conflict(
            f"proposal {number + 1} of session {session} was answered already; it now waits on another"
        )


def only_args(sessions: Sessions, session: str, chosen: list[str]) -> list[str]:
    """`--only` options for the candidates ticked on the page: none when every candidate of the
    batch (or the one proposal) is approved; ToolError when none is ticked or a name is not in
    the batch (the CLI's own check)."""
    pending = sessions.pending_approval(session) or {}
    ids = [c["playbook"] for c in pending.get("candidates", [])]
    if not ids:
        return []
    if not chosen:
        raise ToolError("approve: no candidate ticked; tick those to try, or reject the batch")
    refused = batch_refusal(session, pending, {"playbooks": chosen})
    if refused is not None:
        raise ToolError(refused)
    if set(chosen) == set(ids):
        return []
    return [arg for pb in chosen for arg in ("--only", pb)]


def claim(sessions: Sessions, session: str, number: int) -> Path:
    """Claim the answer to approval `number` of the session (once: O_EXCL); Conflict otherwise."""
    check(sessions, session, number)
    path = web_dir(sessions, session) / f"answer-{number}.claim"
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        raise Conflict(f"proposal {number + 1} of session {session} was answered already") from None
    return path


def claimed(sessions: Sessions, session: str, number: int) -> bool:
    """Whether approval `number` was answered from the page."""
    return (sessions.session_dir(session) / "web" / f"answer-{number}.claim").exists()


def run_cli(sessions: Sessions, session: str, number: int, args: list[str]) -> Path:
    """Start `perfloop ARGS` in the background with this $PERFLOOP_HOME; returns its log file."""
    log = web_dir(sessions, session) / f"answer-{number}.log"
    env = {**os.environ, "PERFLOOP_HOME": str(sessions.home)}
    with open(log, "wb") as out, _lock:
        _children.append(
            subprocess.Popen(
                [sys.executable, "-m", "agent.cli", *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        )
    return log


def reap() -> None:
    """Collect the answer processes that have ended (no zombies in a long-running server)."""
    with _lock:
        _children[:] = [p for p in _children if p.poll() is None]


def last_answer_log(sessions: Sessions, session: str) -> str | None:
    """The tail of the latest answer process's output (its error, when it failed)."""
    logs = list((sessions.session_dir(session) / "web").glob("answer-*.log"))
    if not logs:
        return None
    latest = max(logs, key=lambda p: int(p.stem.removeprefix("answer-")))
    text = latest.read_text(errors="replace").strip()
    return text[-2000:] or None


def unsigned(sessions: Sessions, session: str) -> str | None:
    """Why this user's key did not sign what the paused session would run (the page says so
    above its approval, which is refused), or None (agent/sessions/trust/signing.py)."""
    saver: Any = sessions.graph.checkpointer
    digest, why, _ = saver.status(sessions.config(session))
    return None if digest is None else why
