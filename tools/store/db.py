"""Where the session store lives, and its versioned schema: SQLite under $PERFLOOP_HOME (the
default) or a PostgreSQL database named by `PERFLOOP_STORE=postgresql://...` (or `--store`), shared
by every machine that points at it.

`Db` hides the two drivers behind one small surface (`rows`, `run`, `transaction`); SQL is written
once with `?` placeholders and upserts as `INSERT ... ON CONFLICT`, which both engines speak. The
schema is perfloop's own, versioned in `perfloop_schema` and migrated forward on open, one step at
a time inside a transaction (on Postgres under an advisory lock, so two machines opening a new
database at once do not race). LangGraph's checkpoint tables are migrated by LangGraph itself
(agent/sessions/checkpoint.py).

A PostgreSQL connection that drops (the server restarted, a network cut) is opened again, retried
for up to $PERFLOOP_STORE_RECONNECT_SECONDS (default 60), and the statement it broke is sent again
(a transaction's block cannot be: its start checks the connection first); past that the store is
`StoreUnreachable`, which ends a session as interrupted (agent/sessions/runner.py).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tools.errors import ConfigError, StoreUnreachable, first_line
from tools.secrets import redact, register

STORE_ENV = "PERFLOOP_STORE"
RECONNECT_ENV = "PERFLOOP_STORE_RECONNECT_SECONDS"


def reconnect_seconds() -> float:
    """How long a dropped connection to a PostgreSQL store is retried ($PERFLOOP_STORE_RECONNECT_SECONDS)."""
    raw = os.environ.get(RECONNECT_ENV, "60")
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ConfigError(f"{RECONNECT_ENV} must be a number of seconds, not {raw!r}") from None


_V1 = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, info TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tool_calls (
    session_id TEXT NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL,
    superseded INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, seq));
CREATE TABLE IF NOT EXISTS inputs (
    session_id TEXT NOT NULL, n INTEGER NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (session_id, n));
CREATE TABLE IF NOT EXISTS aa_launches (
    target_key TEXT NOT NULL, session_id TEXT NOT NULL, launch_number INTEGER NOT NULL,
    sample TEXT NOT NULL, PRIMARY KEY (session_id, launch_number));
"""
_LEASES = """
CREATE TABLE IF NOT EXISTS session_leases (
    session_id TEXT PRIMARY KEY, holder TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL);
"""
_OUTPUT_NOISE = """
CREATE TABLE IF NOT EXISTS output_noise (
    noise_key TEXT NOT NULL, session_id TEXT PRIMARY KEY, sample TEXT NOT NULL);
"""
_NUMERICS = """
CREATE TABLE IF NOT EXISTS numerics_noise (
    noise_key TEXT NOT NULL, session_id TEXT PRIMARY KEY, sample TEXT NOT NULL);
"""
MIGRATIONS: dict[str, list[str]] = {
    # v1: the tables SQLite stores had before versioning (created by `IF NOT EXISTS`, so a store
    # made by an older perfloop is adopted as v1); v2: leases for the per-session lock; v3: each
    # baseline's output noise, published per host and engine; v4: each baseline's numerics (issue 61).
    "sqlite": [_V1, _LEASES, _OUTPUT_NOISE, _NUMERICS],
    # Postgres has no rowid: `added` keeps the A/A store's (and the output noise's) insertion order.
    "postgres": [
        _V1.replace("sample TEXT NOT NULL,", "sample TEXT NOT NULL, added BIGSERIAL,"),
        _LEASES,
        _OUTPUT_NOISE.replace("sample TEXT NOT NULL)", "sample TEXT NOT NULL, added BIGSERIAL)"),
        _NUMERICS.replace("sample TEXT NOT NULL)", "sample TEXT NOT NULL, added BIGSERIAL)"),
    ],
}
SCHEMA_VERSION = len(MIGRATIONS["sqlite"])


def store_url() -> str | None:
    """The PostgreSQL URL in $PERFLOOP_STORE, if any (its password registered as a secret); a value
    that is neither empty, `sqlite` nor a postgresql:// URL is bad input."""
    url = os.environ.get(STORE_ENV, "").strip()
    if url in ("", "sqlite"):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(
            f"{STORE_ENV} / --store must be a postgresql://USER:PASSWORD@HOST:PORT/DB URL (or empty for "
            f"SQLite under $PERFLOOP_HOME), not a {parts.scheme or 'plain'!r} value"
        )
    if parts.password:
        register(parts.password)
    return url


def describe(url: str | None, home: Path) -> str:
    """Where the store is, without its password (for messages)."""
    if url is None:
        return str(home)
    p = urlsplit(url)
    where = f"{p.hostname or 'localhost'}{':' + str(p.port) if p.port else ''}"
    return f"postgresql://{p.username + '@' if p.username else ''}{where}{p.path}"


class Db:
    """One connection to the store's database (SQLite file or PostgreSQL), safe across threads."""

    def __init__(self, url: str | None, sqlite_path: Path) -> None:
        self.dialect = "sqlite" if url is None else "postgres"
        self._url = url
        self._lock = threading.RLock()
        self._depth = 0
        self._down = False  # a reconnect gave up: later statements try once, not for the window
        if url is None:
            self._conn: Any = sqlite3.connect(
                sqlite_path, check_same_thread=False, isolation_level=None, timeout=30
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
        else:
            self._conn = pg_connect(url)
        self._migrate()

    def close(self) -> None:
        self._conn.close()

    def _sql(self, sql: str) -> str:
        return sql if self.dialect == "sqlite" else sql.replace("?", "%s")

    @property
    def now(self) -> str:
        """SQL for the database's clock in seconds since the epoch (one clock for all machines)."""
        if self.dialect == "sqlite":
            return "((julianday('now') - 2440587.5) * 86400.0)"
        return "extract(epoch from clock_timestamp())"

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return list(self._execute(sql, params).fetchall())

    def run(self, sql: str, params: tuple = ()) -> int:
        """Execute one statement; the number of rows it changed."""
        with self._lock:
            return int(self._execute(sql, params).rowcount)

    def _execute(self, sql: str, params: tuple) -> Any:
        """One statement; on Postgres, outside a transaction, sent again on a new connection when
        the one it went out on had dropped."""
        try:
            return self._conn.execute(self._sql(sql), params)
        except self.errors as exc:
            if not self._dropped() or self._depth:
                raise
            self._reconnect(exc)
        return self._conn.execute(self._sql(sql), params)

    def _dropped(self) -> bool:
        return self.dialect == "postgres" and bool(self._conn.closed)

    def _reconnect(self, exc: Exception) -> None:
        """Open the connection again, retrying for the reconnect window (once, when an earlier
        window ran out); StoreUnreachable when it cannot. One warning line when it comes back."""
        import psycopg

        assert self._url is not None
        where, lost, t0 = describe(self._url, Path()), first_line(exc), time.monotonic()
        window = 0.0 if self._down else reconnect_seconds()
        while True:
            try:
                conn = psycopg.connect(self._url, autocommit=True, connect_timeout=10)
                break
            except psycopg.Error as refused:
                if time.monotonic() - t0 >= window:
                    self._down = True
                    tried = f"; tried for {window:.0f} s, {RECONNECT_ENV}" if window else ""
                    raise StoreUnreachable(
                        f"the session store {where} is unreachable ({first_line(refused)}{tried})"
                    ) from None
                time.sleep(1.0)
        self._conn, self._down = conn, False
        print(
            redact(
                f"warning: the connection to the session store {where} was lost ({lost}); "
                f"reconnected after {time.monotonic() - t0:.0f} s"
            ),
            file=sys.stderr,
        )

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """The exceptions the driver raises for a statement the database refuses."""
        if self.dialect == "sqlite":
            return (sqlite3.Error,)
        import psycopg

        return (psycopg.Error,)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Statements inside run as one transaction (SQLite: BEGIN IMMEDIATE, a writer at once);
        one inside another is part of the outer one."""
        with self._lock:
            if self._depth:
                yield
                return
            if self.dialect == "postgres":  # a dropped connection is found (and opened again) here
                self.run("SELECT 1")
            self._depth = 1
            try:
                if self.dialect == "sqlite":
                    self._conn.execute("BEGIN IMMEDIATE")
                    try:
                        yield
                    except BaseException:
                        self._conn.execute("ROLLBACK")
                        raise
                    self._conn.execute("COMMIT")
                else:
                    with self._conn.transaction():
                        yield
            finally:
                self._depth = 0

    def serialize(self, key: str) -> None:
        """Inside a transaction: wait for any other transaction holding `key` (on SQLite,
        BEGIN IMMEDIATE already lets one writer in at a time)."""
        if self.dialect == "postgres":
            self.run("SELECT pg_advisory_xact_lock(hashtext(?))", (key,))

    def version(self) -> int:
        row = self.rows("SELECT MAX(version) FROM perfloop_schema")[0]
        return int(row[0] or 0)

    def _migrate(self) -> None:
        with self.transaction():
            if self.dialect == "postgres":  # one migrating process per database at a time
                self.run("SELECT pg_advisory_xact_lock(7317001)")
            self.run("CREATE TABLE IF NOT EXISTS perfloop_schema (version INTEGER PRIMARY KEY)")
            have = self.version()
            steps = MIGRATIONS[self.dialect]
            if have > len(steps):
                raise ConfigError(
                    f"the session store has schema version {have}, newer than this perfloop's "
                    f"{len(steps)}; upgrade perfloop"
                )
            for v, ddl in enumerate(steps[have:], start=have + 1):
                for stmt in filter(str.strip, ddl.split(";")):
                    self.run(stmt)
                self.run("INSERT INTO perfloop_schema (version) VALUES (?)", (v,))


def pg_connect(url: str, **kwargs: Any) -> Any:
    """A psycopg connection in autocommit mode; a failure is one line without the password."""
    import psycopg  # only when a Postgres store is used

    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=10, **kwargs)
    except psycopg.Error as exc:
        first = first_line(exc)
        raise ConfigError(
            f"cannot connect to the session store {describe(url, Path())}: {first}; check "
            f"{STORE_ENV} / --store (and that the server is up)"
        ) from None
