"""`perfloop sessions` beside what this user's key signed (issue 62; agent/sessions/trust/listed.py):
each store row against its session's latest checkpoint in a SQLite checkpointer written here as
LangGraph's SqliteSaver lays it out (the PostgreSQL store: tests/e2e/test_store_race.py)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from agent.sessions.trust import ledger
from agent.sessions.trust.listed import checked, one
from agent.sessions.trust.signing import SEQ, SIGNATURE, field_digest, seal, user_key
from state.sessions.session import SessionInfo, Summary
from tools.store.sessions import SessionStore

TABLES = (
    "CREATE TABLE checkpoints (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, "
    "parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB)",
    "CREATE TABLE writes (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, task_id TEXT, "
    "idx INTEGER, channel TEXT, type TEXT, value BLOB)",
)


def row(sid: str, status: str, commits: tuple[str, ...] = ()) -> SessionInfo:
    summary = Summary.model_validate(
        {
            "session": sid,
            "status": status,
            "tpot_ms_before": 10.0,
            "tpot_ms_after": 5.0,
            "speedup": 2.0,
            "ttft_ms_before": None,
            "ttft_ms_after": None,
            "outputs_identical": True,
            "accepted": ["fix"] if commits else [],
            "rejected": [],
            "commits": list(commits),
            "branch": "perfloop/x",
            "server_launches": 2,
            "profile_method": "api",
            "iterations": 1,
            "stop_reason": "x",
            "repo": "/r",
        }
    )
    return SessionInfo(
        id=sid,
        created_at=datetime.now(UTC),
        target_name="t",
        target_path=None,
        repo=Path("/r"),
        status=status,
        summary=summary,
    )


def checkpoint(home: Path, sid: str, cid: str, fields: dict | None, interrupt: bool = False) -> None:
    """A checkpoint of `sid` signed with `fields` under this home's key (None: unsigned)."""
    with sqlite3.connect(home / "checkpoints.sqlite") as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'checkpoints'").fetchall():
            for sql in TABLES:
                db.execute(sql)
        meta = {SIGNATURE: seal(user_key(home), sid, fields)} if fields is not None else {}
        db.execute(
            "INSERT INTO checkpoints VALUES (?, '', ?, NULL, 'msgpack', x'', ?)",
            (sid, cid, json.dumps(meta).encode()),
        )
        if interrupt:
            db.execute(
                "INSERT INTO writes VALUES (?, '', ?, 't', 0, '__interrupt__', 'msgpack', x'')", (sid, cid)
            )


def test_each_row_is_listed_as_its_signed_checkpoint_supports(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store = SessionStore.open(home)
    done, failed = (
        {"status": field_digest("done"), "accepted": "a", SEQ: "3"},
        {"status": field_digest("failed"), SEQ: "2"},
    )
    cases = {  # session: (its row, its checkpoint's signed fields or None, waits, this machine signed it)
        "20260101-000000-0001": (row("20260101-000000-0001", "done", ("c0ffee",)), {SEQ: "2"}, True, True),
        "20260101-000000-0002": (row("20260101-000000-0002", "done"), {SEQ: "2"}, False, True),
        "20260101-000000-0003": (row("20260101-000000-0003", "done", ("c0ffee",)), done, False, True),
        "20260101-000000-0004": (row("20260101-000000-0004", "done"), failed, False, True),
        "20260101-000000-0005": (
            row("20260101-000000-0005", "paused", ("deadbeef00",)),
            {SEQ: "2"},
            True,
            True,
        ),
        "20260101-000000-0006": (row("20260101-000000-0006", "done"), None, False, True),
        "20260101-000000-0007": (row("20260101-000000-0007", "done"), None, False, False),
        "20260101-000000-0008": (row("20260101-000000-0008", "done"), done | {SEQ: "1"}, False, True),
    }
    for sid, (info, fields, waits, ours) in cases.items():
        store.put_session(info)
        checkpoint(home, sid, "1f0-" + sid[-4:], fields, waits)
        if ours:
            ledger.signed_checkpoint(home, sid, 2, "1f0-" + sid[-4:])
    store.put_session(row("20260101-000000-0009", "done"))  # an imported recording: no checkpoint here
    listed = checked(store, home, store.list_sessions())
    assert [one(store, home, i) for i in store.list_sessions()] == listed  # `show`'s, one at a time
    shown = {i.id: (i.status, i.summary is not None, signed, line) for i, signed, line in listed}
    says = "the store's row says 'done' (not signed)"
    assert shown == {
        "20260101-000000-0001": ("paused", False, True, f"{says}: its signed checkpoint waits for approval"),
        "20260101-000000-0002": ("interrupted", False, True, f"{says}: its signed checkpoint has not ended"),
        "20260101-000000-0003": ("done", True, True, None),
        "20260101-000000-0004": ("failed", False, True, f"{says}: its signed checkpoint says 'failed'"),
        "20260101-000000-0005": (
            "paused",
            False,
            True,
            "the store's row's summary (not signed) names commits deadbeef00: its signed checkpoint has none",
        ),
        "20260101-000000-0006": (
            "done",
            False,
            False,
            f"{says}, unverified: its latest checkpoint is not signed by this user's key "
            "(`perfloop show 20260101-000000-0006`)",
        ),
        "20260101-000000-0007": ("done", True, False, None),  # not this machine's: its row as it says
        "20260101-000000-0008": (
            "done",
            False,
            False,
            f"{says}, unverified: its latest checkpoint is older than the last this machine signed",
        ),
        "20260101-000000-0009": ("done", True, None, None),
    }
