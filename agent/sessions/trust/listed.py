"""What `perfloop sessions` and `perfloop show` show of each store row, checked against the
session's latest checkpoint as this user's key signed it (issue 62; docs/SECURITY.md, "A store
peer").

The `sessions` row (status, summary) is not signed: a store peer can write "done" with its own
speedup and commits beside a session whose signed checkpoint waits for approval. So each row of a
session with checkpoints here is compared with what this key signed of its latest one: the
state's `status` (signed as a digest: `done` or `failed` once the loop ended, else still
`running`) and whether it holds accepted commits. A row whose word its checkpoint does not
support is shown as the checkpoint says (`paused` when an approval waits on it, else
`interrupted`, or the ended status), without its summary, and named in a line; so is a summary
naming commits the signed state has none of. A session this machine signed (`ledger.py`) whose
latest checkpoint is not this key's, is gone or was rolled back is shown without its summary,
marked unverified. Other keys' sessions, and imported recordings (no checkpoint here), are shown
as their rows say. A summary's figures are not signed, nor checked here: no state is read (no
LangGraph, no loop state: the list stays light, issue 63); `show` applies the same rule (`one`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from agent.sessions.trust import ledger
from agent.sessions.trust.signing import SEQ, SIGNATURE, field_digest, key_here, ours
from state.sessions.session import SessionStatus

if TYPE_CHECKING:
    from state.sessions.session import SessionInfo
    from tools.store.sessions import SessionStore

ENDED = ("done", "failed")
"""The statuses a session's state ends with (agent/steps/end.py); the row's other words (paused,
interrupted, abandoned) are its alone, the state's `running` until the loop ends."""
LATEST = (
    "SELECT c.thread_id, c.checkpoint_id, c.metadata FROM checkpoints c WHERE c.checkpoint_ns = '' "
    "AND c.checkpoint_id = (SELECT max(d.checkpoint_id) FROM checkpoints d "
    "WHERE d.thread_id = c.thread_id AND d.checkpoint_ns = '')"
)
ONE = " AND c.thread_id = ?"
"""`LATEST` of one session (`show`)."""
WAITS = (
    "SELECT 1 FROM {writes} WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id = ? "
    "AND channel = '__interrupt__' LIMIT 1"
)
Row = tuple["SessionInfo", bool | None, str | None]


def one(store: SessionStore, home: Path, info: SessionInfo) -> Row:
    """`checked` of one session's row (`perfloop show`): its latest checkpoint alone read."""
    return checked(store, home, [info], only=info.id)[0]


def checked(store: SessionStore, home: Path, infos: list[SessionInfo], only: str | None = None) -> list[Row]:
    """Each row as `perfloop sessions` shows it: (the row, or as its signed checkpoint says;
    whether its latest checkpoint here is this user's key's, None when it has none here; the line
    that names what of the row is not shown, or None). `only`: the one session whose checkpoint
    is read."""
    key, latest = key_here(home), _latest(store, home, only)
    out: list[Row] = []
    for info in infos:
        here = ledger.read(home, info.id)  # what this machine signed of it ({}: nothing)
        if (found := latest.get(info.id)) is None:
            gone = "its checkpoints are gone from the store"
            out.append(_unverified(info, gone) if here else (info, None, None))
            continue
        checkpoint, metadata = found
        fields = ours(key, info.id, metadata.get(SIGNATURE))
        if fields is None:
            why = f"its latest checkpoint is not signed by this user's key (`perfloop show {info.id}`)"
            out.append(_unverified(info, why) if here else (info, False, None))
        elif _seq(fields.get(SEQ)) < _seq(here.get("seq")):
            out.append(_unverified(info, "its latest checkpoint is older than the last this machine signed"))
        else:
            out.append(_as_signed(info, fields, partial(_waits, store, home, info.id, checkpoint)))
    return out


def _as_signed(info: SessionInfo, fields: dict[str, str], waits: Callable[[], bool]) -> Row:
    """The row beside what this key signed of its latest checkpoint (`fields`); `waits()`: whether
    an approval waits on that checkpoint (read only when the row claims an end it has not)."""
    said = info.status
    status = next((w for w in get_args(SessionStatus) if field_digest(w) == fields.get("status")), None)
    status = "running" if "status" not in fields else status  # at its default: not signed, not ended
    if status is None or (status in ENDED and said != status):
        shown = status or said
        return _corrected(info, shown, f"its signed checkpoint says {shown!r}" if status else "")
    if status not in ENDED and said in ENDED:
        if waits():
            return _corrected(info, "paused", "its signed checkpoint waits for approval")
        return _corrected(info, "interrupted", "its signed checkpoint has not ended")
    s = info.summary
    if s is not None and (s.session != info.id or (s.commits and "accepted" not in fields)):
        names = f"commits {', '.join(s.commits)}" if s.session == info.id else f"session {s.session}'s"
        line = f"the store's row's summary (not signed) names {names}: its signed checkpoint has none"
        return info.model_copy(update={"summary": None}), True, line
    return info, True, None


def _corrected(info: SessionInfo, status: str, why: str) -> Row:
    said, shown = info.status, info.model_copy(update={"status": status, "summary": None})
    if not why:  # a status digest this perfloop knows no word of
        return _unverified(info, "its signed status is none this perfloop knows")
    return shown, True, f"the store's row says {said!r} (not signed): {why}"


def _unverified(info: SessionInfo, why: str) -> Row:
    line = f"the store's row says {info.status!r} (not signed), unverified: {why}"
    return info.model_copy(update={"summary": None}), False, line


def _seq(value: object) -> int:
    """A checkpoint's number as signed (`SEQ`) or kept in the ledger; 0 when it has none."""
    try:
        return int(str(value or 0))
    except ValueError:
        return 0


def _latest(store: SessionStore, home: Path, only: str | None = None) -> dict[str, tuple[str, dict]]:
    """Each session's (`only`'s) latest checkpoint here: (its id, its metadata), read in the
    checkpointer's own table (PostgreSQL: the store's database; else `checkpoints.sqlite` under
    the home), none when it cannot be read."""
    try:
        rows = _read(store, home, LATEST + ONE, (only,)) if only else _read(store, home, LATEST, ())
    except _errors(store):
        return {}
    out = {}
    for sid, checkpoint, metadata in rows:
        if isinstance(metadata, bytes | str):
            try:
                metadata = json.loads(metadata)
            except ValueError:
                metadata = {}
        out[str(sid)] = (str(checkpoint), metadata if isinstance(metadata, dict) else {})
    return out


def _waits(store: SessionStore, home: Path, sid: str, checkpoint: str) -> bool:
    """Whether an approval waits on the checkpoint: its `__interrupt__` write (not signed: it tells
    `paused` from `interrupted`, neither of which claims a result)."""
    writes = "checkpoint_writes" if store.url is not None else "writes"
    try:
        return bool(_read(store, home, WAITS.format(writes=writes), (sid, checkpoint)))
    except _errors(store):
        return False


def _errors(store: SessionStore) -> tuple[type[Exception], ...]:
    return (sqlite3.Error, *store.db.errors)


def _read(store: SessionStore, home: Path, sql: str, params: tuple) -> list[tuple]:
    if store.url is not None:  # LangGraph's PostgresSaver: its tables in the store's database
        return store.db.rows(sql, params)
    path = home / "checkpoints.sqlite"
    if not path.is_file():
        return []
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30)) as db:
        return db.execute(sql, params).fetchall()
