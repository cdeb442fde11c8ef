"""Answering a session that waits for approval: the one code path behind `perfloop approve|reject`
and the approval page of `perfloop serve` (which runs those same commands)."""

from __future__ import annotations

from pathlib import Path

from agent.sessions.binding import check_digest
from agent.sessions.remote import executor_for
from agent.sessions.runner import Sessions
from state.door.calls import ApplyArgs
from state.engines.workspace import PatchPolicy
from state.sessions.loop import LoopState
from tools.door.registry import spec_of
from tools.errors import ConfigError, PatchError, ToolError
from tools.workspace.repo import check_patch


def edited_patch(session: str, path: Path) -> str:
    """Read a human-edited patch and pass it through the patch gate against the paused session's
    repo (tools/workspace/patch_check.py; changes nothing). Refused: bad input, the session stays paused."""
    state = Sessions().state(session)
    cap = state.target.max_patch_bytes
    try:
        if path.stat().st_size > cap:
            raise ToolError(
                f"--patch: patch refused: {path} is {path.stat().st_size} bytes, over the limit of {cap} "
                "(`max_patch_bytes` in the target)"
            )
        diff = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"--patch: cannot read edited patch {path}: {exc}") from exc
    policy = PatchPolicy(max_bytes=cap, allow_binary=False)
    args = ApplyArgs(repo=state.target.repo, diff=diff, subject="check", trailers={}, policy=policy)
    try:
        with executor_for(state.target, state.options.session_dir) as remote:  # where the repo lives
            remote.call(spec_of(check_patch), args) if remote else check_patch(args)
    except PatchError as exc:
        raise PatchError(f"--patch {path}: {exc}") from None
    return diff


def answer_session(sessions: Sessions, session: str, answer: dict, digest: str | None = None) -> LoopState:
    """Record the answer of a paused session and continue it (in this process, under its lock);
    refused when `digest` (the one the approval view showed) is not the stored state's."""
    sessions.info(session)
    pending = sessions.pending_approval(session)
    if pending is None:
        raise ToolError(
            f"session {session} is not waiting for approval (status "
            f"{sessions.info(session).status}); see `perfloop show {session}`"
        )
    if digest is not None:
        check_digest(session, digest, pending)
    refused = batch_refusal(session, pending, answer)
    if refused is not None:
        raise ConfigError(refused)
    return sessions.resume(session, answer)


def batch_refusal(session: str, pending: dict, answer: dict) -> str | None:
    """Why `answer` does not fit what the session waits on (a batch of parallel candidates or one
    proposal), or None (pure)."""
    ids = [c["playbook"] for c in pending.get("candidates", [])]
    only = answer.get("playbooks")
    if not ids:
        if only is None:
            return None
        return f"--only: session {session} waits on one proposal ({pending['playbook']}), not a batch; leave --only out"
    if answer.get("diff") is not None:
        return (
            f"--patch: session {session} waits on a batch of {len(ids)} candidates for [[hosts]] "
            f"({', '.join(ids)}), not one patch; approve (--only ID to pick) or reject the batch"
        )
    unknown = [p for p in only or [] if p not in ids]
    if unknown:
        return f"--only {', '.join(unknown)}: not in the batch; choose from {', '.join(ids)}"
    return None


def approval_number(sessions: Sessions, session: str) -> int | None:
    """Which approval the session waits on (0 for its first), or None when it waits on none: two
    answers to the same number answer the same proposal."""
    if sessions.pending_approval(session) is None:
        return None
    return len(sessions.store.inputs(session, "answer"))
