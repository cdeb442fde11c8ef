"""The session store: sessions and their recordings, in SQLite under $PERFLOOP_HOME
(`sessions.sqlite`) or in the PostgreSQL database of $PERFLOOP_STORE (tools/store/db.py).

LangGraph's checkpoints live beside it (`checkpoints.sqlite`, or the same database; see
agent/sessions/checkpoint.py); this store
holds what LangGraph does not: the session index, each session's initial state and approval answers,
and the recording of every tool call. Everything written here passes through `secrets.redact`.
Calls made by a node that was killed before it finished are kept but marked superseded: the node ran
again on resume, and replay follows the calls of the attempts that completed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from state.door.records import ToolCallRecord
from state.measurement.aa import AASample
from state.measurement.correctness import OutputNoiseSample
from state.measurement.numerics import NumericsSample
from state.sessions.session import SessionInfo
from tools.paths import session_id as checked_id
from tools.secrets import redact
from tools.store.db import Db, store_url
from tools.store.lease import dead_here


def perfloop_home() -> Path:
    """$PERFLOOP_HOME, default ~/.perfloop (created if missing)."""
    home = Path(os.environ.get("PERFLOOP_HOME") or Path.home() / ".perfloop").expanduser()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    if home.stat().st_mode & 0o077 and home.stat().st_uid == os.getuid():
        home.chmod(0o700)  # an older home, or one made by hand: its sessions are this user's alone
    return home


class SessionStore:
    """Sessions, their inputs and their recorded tool calls."""

    def __init__(self, path: Path, url: str | None = None) -> None:
        """The store at `url` (PostgreSQL), else the SQLite file `path`."""
        self.path = path
        self.url = url
        self.db = Db(url, path)
        self.home: Path | None = None
        """The $PERFLOOP_HOME it was opened for (`open`): tells this machine's leases (`held`)."""

    @classmethod
    def open(cls, home: Path) -> SessionStore:
        """The store this process uses: $PERFLOOP_STORE's database, else `home/sessions.sqlite`."""
        store = cls(home / "sessions.sqlite", store_url())
        store.home = home
        return store

    def close(self) -> None:
        self.db.close()

    def put_session(self, info: SessionInfo) -> None:
        """Insert or replace a session's index entry."""
        self.db.run(
            "INSERT INTO sessions VALUES (?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET created_at = excluded.created_at, info = excluded.info",
            (info.id, info.created_at.isoformat(), redact(info.model_dump_json())),
        )

    def get_session(self, session_id: str) -> SessionInfo | None:
        rows = self.db.rows("SELECT info FROM sessions WHERE id = ?", (checked_id(session_id),))
        return SessionInfo.model_validate_json(rows[0][0]) if rows else None

    def list_sessions(self) -> list[SessionInfo]:
        rows = self.db.rows("SELECT info FROM sessions ORDER BY created_at")
        return [SessionInfo.model_validate_json(r[0]) for r in rows]

    def session_page(self, limit: int, offset: int = 0) -> list[SessionInfo]:
        """The newest sessions first, `limit` of them from `offset` (the approval page's list)."""
        rows = self.db.rows(
            "SELECT info FROM sessions ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            (int(limit), int(offset)),
        )
        return [SessionInfo.model_validate_json(r[0]) for r in rows]

    def count_sessions(self) -> int:
        return int(self.db.rows("SELECT COUNT(*) FROM sessions")[0][0])

    def held(self) -> dict[str, str]:
        """Sessions running right now (tools/store/lease.py): id -> `HOST pid PID`, each with a
        live lease but those whose holder ran on this machine and is gone (SIGKILLed: its lease
        not yet expired), as `hold` takes them over at once."""
        rows = self.db.rows(
            f"SELECT session_id, holder, host, pid FROM session_leases WHERE expires_at > {self.db.now}"
        )
        home = self.home
        return {
            sid: f"{host} pid {pid}"
            for sid, holder, host, pid in rows
            if home is None or not dead_here(holder, home)
        }

    def add_input(self, session_id: str, kind: str, value: Any) -> None:
        """Append an input of the session: its `initial` state, or an approval `answer`."""
        checked_id(session_id)
        with self.db.transaction():
            n = self.db.rows("SELECT COUNT(*) FROM inputs WHERE session_id = ?", (session_id,))[0][0]
            self.db.run(
                "INSERT INTO inputs VALUES (?, ?, ?, ?)", (session_id, n, kind, redact(json.dumps(value)))
            )

    def inputs(self, session_id: str, kind: str) -> list[Any]:
        rows = self.db.rows(
            "SELECT value FROM inputs WHERE session_id = ? AND kind = ? ORDER BY n",
            (checked_id(session_id), kind),
        )
        return [json.loads(r[0]) for r in rows]

    def next_seq(self, session_id: str) -> int:
        rows = self.db.rows(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM tool_calls WHERE session_id = ?", (session_id,)
        )
        return int(rows[0][0])

    def record(self, call: ToolCallRecord) -> None:
        """Append one tool call."""
        self.db.run(
            "INSERT INTO tool_calls (session_id, seq, record) VALUES (?, ?, ?)",
            (call.session_id, call.seq, redact(call.model_dump_json())),
        )

    def supersede_after(
        self, session_id: str, done: int, finished: Collection[str] = (), spawned: int = 0
    ) -> int:
        """Mark calls with seq >= done superseded (made by a node that never finished), except
        those of the parallel tasks in `finished` (their writes are in the checkpoint: LangGraph
        does not run them again, so their calls stay the recording of what they did). The highest
        launch number they used, or `spawned` (a launch killed before its call was recorded), is
        kept as a `cut` input (`cut_launches`)."""
        with self.db.transaction():
            rows = self.db.rows(
                "SELECT seq, record FROM tool_calls WHERE session_id = ? AND seq >= ? AND superseded = 0",
                (session_id, done),
            )
            keep = set(finished)
            calls = [ToolCallRecord.model_validate_json(text) for _, text in rows]
            cut = [r for r in calls if r.task_id not in keep]
            gone = [r.seq for r in cut]
            for seq in gone:
                self.db.run(
                    "UPDATE tool_calls SET superseded = 1 WHERE session_id = ? AND seq = ?", (session_id, seq)
                )
            numbers = [c.input.get("launch_number") for c in cut if c.name == "server.launch"]
            high = max([spawned, *(n for n in numbers if isinstance(n, int))])
            if high:  # from the next call on, launches are numbered past it
                self.add_input(session_id, "cut", {"seq": self.next_seq(session_id), "launch": high})
        return len(gone)

    def cut_launches(self, session_id: str) -> list[tuple[int, int]]:
        """(seq, n) of each resume that superseded launches: from call `seq` on, a session with
        `LoopOptions.launches_past_cuts` numbers its launches past `n`, the highest they used."""
        return [(int(v["seq"]), int(v["launch"])) for v in self.inputs(session_id, "cut")]

    def superseded_call(self, session_id: str, name: str, inp: dict[str, Any]) -> ToolCallRecord | None:
        """The latest superseded, successful call of tool `name` with exactly this input, if any."""
        rows = self.db.rows(
            "SELECT record FROM tool_calls WHERE session_id = ? AND superseded = 1 ORDER BY seq DESC",
            (session_id,),
        )
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
        rows = self.db.rows(sql + " ORDER BY seq", (checked_id(session_id),))
        return [ToolCallRecord.model_validate_json(r[0]) for r in rows]

    def recording_digest(self, session_id: str) -> str:
        """A digest of what a replay of the session reads: its inputs and its tool calls, as stored."""
        sid, digest = checked_id(session_id), hashlib.sha256()
        for row in [
            *self.db.rows("SELECT n, kind, value FROM inputs WHERE session_id = ? ORDER BY n", (sid,)),
            *self.db.rows(
                "SELECT seq, superseded, record FROM tool_calls WHERE session_id = ? ORDER BY seq", (sid,)
            ),
        ]:
            digest.update(json.dumps(list(row)).encode() + b"\n")
        return digest.hexdigest()

    def add_aa(self, sample: AASample) -> None:
        """Keep one A/A launch (a baseline launch); the same launch again replaces itself."""
        key = (sample.session_id, sample.launch_number)
        with self.db.transaction():  # delete + insert: a replaced launch moves to the end, as before
            self.db.run("DELETE FROM aa_launches WHERE session_id = ? AND launch_number = ?", key)
            self.db.run(
                "INSERT INTO aa_launches (target_key, session_id, launch_number, sample) VALUES (?, ?, ?, ?)",
                (sample.target_key, *key, sample.model_dump_json()),
            )

    def add_output_noise(self, sample: OutputNoiseSample) -> None:
        """Keep one baseline's output noise; the same session's again replaces it."""
        with self.db.transaction():  # delete + insert: a replaced one moves to the end
            self.db.run("DELETE FROM output_noise WHERE session_id = ?", (sample.session_id,))
            self.db.run(
                "INSERT INTO output_noise (noise_key, session_id, sample) VALUES (?, ?, ?)",
                (sample.key, sample.session_id, sample.model_dump_json()),
            )

    def output_noise(self, key: str) -> list[OutputNoiseSample]:
        """Every baseline's output noise kept for an engine on a host, oldest first."""
        order = "rowid" if self.db.dialect == "sqlite" else "added"
        rows = self.db.rows(f"SELECT sample FROM output_noise WHERE noise_key = ? ORDER BY {order}", (key,))
        return [OutputNoiseSample.model_validate_json(r[0]) for r in rows]

    def add_numerics(self, sample: NumericsSample) -> None:
        """Keep one baseline's numerics; the same session's again replaces it."""
        with self.db.transaction():
            self.db.run("DELETE FROM numerics_noise WHERE session_id = ?", (sample.session_id,))
            self.db.run(
                "INSERT INTO numerics_noise (noise_key, session_id, sample) VALUES (?, ?, ?)",
                (sample.key, sample.session_id, sample.model_dump_json()),
            )

    def numerics(self, key: str) -> list[NumericsSample]:
        """Every baseline's numerics kept for an engine on a host, oldest first."""
        order = "rowid" if self.db.dialect == "sqlite" else "added"
        rows = self.db.rows(f"SELECT sample FROM numerics_noise WHERE noise_key = ? ORDER BY {order}", (key,))
        return [NumericsSample.model_validate_json(r[0]) for r in rows]

    def aa_samples(self, target_key: str) -> list[AASample]:
        """Every A/A launch kept for a target on a host, oldest first."""
        order = "rowid" if self.db.dialect == "sqlite" else "added"
        rows = self.db.rows(
            f"SELECT sample FROM aa_launches WHERE target_key = ? ORDER BY {order}", (target_key,)
        )
        return [AASample.model_validate_json(r[0]) for r in rows]
