"""The session store: one SQLite file under $PERFLOOP_HOME with sessions and their recordings.

LangGraph's checkpoints live beside it in `checkpoints.sqlite` (see agent/checkpoint.py); this store
holds what LangGraph does not: the session index, each session's initial state and approval answers,
and the recording of every tool call. Everything written here passes through `secrets.redact`.
Calls made by a node that was killed before it finished are kept but marked superseded: the node ran
again on resume, and replay follows the calls of the attempts that completed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from state.records import ToolCallRecord
from state.session import SessionInfo
from tools.paths import session_id as checked_id
from tools.secrets import redact

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_calls (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL,
    superseded INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS inputs (
    session_id TEXT NOT NULL, n INTEGER NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (session_id, n));
"""


def perfloop_home() -> Path:
    """$PERFLOOP_HOME, default ~/.perfloop (created if missing)."""
    home = Path(os.environ.get("PERFLOOP_HOME") or Path.home() / ".perfloop").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


class SessionStore:
    """Sessions, their inputs and their recorded tool calls."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)

    def close(self) -> None:
        self._conn.close()

    def _write(self, sql: str, params: tuple) -> None:
        with self._lock:
            self._conn.execute(sql, params)

    def put_session(self, info: SessionInfo) -> None:
        """Insert or replace a session's index entry."""
        self._write(
            "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?)",
            (info.id, info.created_at.isoformat(), redact(info.model_dump_json())),
        )

    def get_session(self, session_id: str) -> SessionInfo | None:
        row = self._conn.execute(
            "SELECT info FROM sessions WHERE id = ?", (checked_id(session_id),)
        ).fetchone()
        return None if row is None else SessionInfo.model_validate_json(row[0])

    def list_sessions(self) -> list[SessionInfo]:
        rows = self._conn.execute("SELECT info FROM sessions ORDER BY created_at").fetchall()
        return [SessionInfo.model_validate_json(r[0]) for r in rows]

    def add_input(self, session_id: str, kind: str, value: Any) -> None:
        """Append an input of the session: its `initial` state, or an approval `answer`."""
        checked_id(session_id)
        n = self._conn.execute("SELECT COUNT(*) FROM inputs WHERE session_id = ?", (session_id,)).fetchone()[
            0
        ]
        self._write(
            "INSERT INTO inputs VALUES (?, ?, ?, ?)", (session_id, n, kind, redact(json.dumps(value)))
        )

    def inputs(self, session_id: str, kind: str) -> list[Any]:
        rows = self._conn.execute(
            "SELECT value FROM inputs WHERE session_id = ? AND kind = ? ORDER BY n",
            (checked_id(session_id), kind),
        ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def next_seq(self, session_id: str) -> int:
        row = self._conn.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM tool_calls WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0])

    def record(self, call: ToolCallRecord) -> None:
        """Append one tool call."""
        self._write(
            "INSERT INTO tool_calls (session_id, seq, record) VALUES (?, ?, ?)",
            (call.session_id, call.seq, redact(call.model_dump_json())),
        )

    def supersede_after(self, session_id: str, done: int) -> int:
        """Mark calls with seq >= done (made by a node that never finished) superseded."""
        with self._lock:
            cur = self._conn.execute(
                "UPDATE tool_calls SET superseded = 1 WHERE session_id = ? AND seq >= ? AND superseded = 0",
                (session_id, done),
            )
            return cur.rowcount

    def superseded_call(self, session_id: str, name: str, inp: dict[str, Any]) -> ToolCallRecord | None:
        """The latest superseded, successful call of tool `name` with exactly this input, if any."""
        rows = self._conn.execute(
            "SELECT record FROM tool_calls WHERE session_id = ? AND superseded = 1 ORDER BY seq DESC",
            (session_id,),
        ).fetchall()
        wanted = json.loads(redact(json.dumps(inp)))  # compared as it was stored
        for (text,) in rows:
            rec = ToolCallRecord.model_validate_json(text)
            if rec.name == name and rec.error is None and rec.output is not None and rec.input == wanted:
                return rec
        return None

    def tool_calls(self, session_id: str, *, include_superseded: bool = False) -> list[ToolCallRecord]:
        sql = "SELECT record FROM tool_calls WHERE session_id = ?"
        if not include_superseded:
            sql += " AND superseded = 0"
        rows = self._conn.execute(sql + " ORDER BY seq", (checked_id(session_id),)).fetchall()
        return [ToolCallRecord.model_validate_json(r[0]) for r in rows]
