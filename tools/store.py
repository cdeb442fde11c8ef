"""The session store: one SQLite file under $PERFLOOP_HOME with sessions and their tool calls.

LangGraph's checkpoints live beside it in `checkpoints.sqlite` (see agent/checkpoint.py); this store
holds what LangGraph does not: the session index and the recording of every tool call.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import datetime, timezone
from pathlib import Path

from state.records import ToolCallRecord
from state.session import SessionInfo

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_calls (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (session_id, seq));
"""


def perfloop_home() -> Path:
    """$PERFLOOP_HOME, default ~/.perfloop (created if missing)."""
    home = Path(os.environ.get("PERFLOOP_HOME") or Path.home() / ".perfloop").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


class SessionStore:
    """Sessions and their recorded tool calls."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)

    @classmethod
    def open_default(cls) -> SessionStore:
        """The store in $PERFLOOP_HOME."""
        return cls(perfloop_home() / "sessions.sqlite")

    def close(self) -> None:
        self._conn.close()

    def put_session(self, info: SessionInfo) -> None:
        """Insert or replace a session's index entry."""
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?)",
                (info.id, info.created_at.isoformat(), info.model_dump_json()),
            )

    def get_session(self, session_id: str) -> SessionInfo | None:
        row = self._conn.execute("SELECT info FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return None if row is None else SessionInfo.model_validate_json(row[0])

    def list_sessions(self) -> list[SessionInfo]:
        rows = self._conn.execute("SELECT info FROM sessions ORDER BY created_at").fetchall()
        return [SessionInfo.model_validate_json(r[0]) for r in rows]

    def next_seq(self, session_id: str) -> int:
        row = self._conn.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM tool_calls WHERE session_id = ?", (session_id,)
        ).fetchone()
        return int(row[0])

    def record(self, call: ToolCallRecord) -> None:
        """Append one tool call (sequence numbers are assigned by the caller via next_seq)."""
        with self._lock:
            self._conn.execute(
                "INSERT INTO tool_calls VALUES (?, ?, ?)",
                (call.session_id, call.seq, call.model_dump_json()),
            )

    def tool_calls(self, session_id: str) -> list[ToolCallRecord]:
        rows = self._conn.execute(
            "SELECT record FROM tool_calls WHERE session_id = ? ORDER BY seq", (session_id,)
        ).fetchall()
        return [ToolCallRecord.model_validate_json(r[0]) for r in rows]


def utcnow() -> datetime:
    """Timezone-aware now, for records."""
    return datetime.now(timezone.utc)
