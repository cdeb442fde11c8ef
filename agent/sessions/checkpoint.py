"""LangGraph checkpointing: SQLite in $PERFLOOP_HOME, or LangGraph's PostgresSaver on the database
of $PERFLOOP_STORE (shared by every machine on it); our state types allow-listed, secrets masked
(the serializer, serde.py, which a replay in memory uses alone).
PostgresSaver takes its connection from a one-connection pool that checks it before each use, so a
connection the server dropped (a restart) is opened again, waited for up to the store's reconnect
window (tools/store/db.py), past which it is `StoreUnreachable`."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg import Connection, Cursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from agent.sessions.reading.serde import serializer
from agent.sessions.trust.saver import Signing
from tools.errors import ConfigError, first_line
from tools.secrets import redact
from tools.store.db import STORE_ENV, StoreUnreachable, describe, reconnect_seconds
from tools.store.sessions import SessionStore

RENAMED_CHANNELS = {"candidate": "candidate_measurement"}
"""LoopState fields renamed since checkpoints were first written (old name: new). A field is a
LangGraph channel of its own name, so a checkpoint written before the rename holds the old one."""


def renamed(found: CheckpointTuple | None) -> CheckpointTuple | None:
    """A checkpoint read back with its renamed channels under their names of today (pure)."""
    if found is None:
        return None
    cp = found.checkpoint
    if not RENAMED_CHANNELS.keys() & cp["channel_versions"].keys():
        return found

    def names(channels: dict[str, Any]) -> dict[str, Any]:
        return {RENAMED_CHANNELS.get(k, k): v for k, v in channels.items()}

    checkpoint: Checkpoint = {
        **cp,
        "channel_values": names(cp["channel_values"]),
        "channel_versions": names(cp["channel_versions"]),
        "versions_seen": {node: names(seen) for node, seen in cp["versions_seen"].items()},
    }
    if cp.get("updated_channels"):
        checkpoint["updated_channels"] = [RENAMED_CHANNELS.get(c, c) for c in cp["updated_channels"] or []]
    writes = [(t, RENAMED_CHANNELS.get(c, c), v) for t, c, v in found.pending_writes or []]
    return found._replace(checkpoint=checkpoint, pending_writes=writes)


class Renaming(BaseCheckpointSaver):
    """Reads checkpoints with `renamed` (a mixin before the saver it reads for)."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return renamed(super().get_tuple(config))

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        for found in super().list(config, **kwargs):
            yield renamed(found) or found


class RenamingSqliteSaver(Signing, Renaming, SqliteSaver):
    """SqliteSaver reading old checkpoints' renamed channels under today's names."""


def open_checkpointer(
    home: Path, url: str | None = None, inputs: SessionStore | None = None
) -> BaseCheckpointSaver:
    """The checkpointer for all sessions: PostgresSaver on `url`, else SQLite in
    `home/checkpoints.sqlite`, its pending writes signed into `inputs`. Each runs LangGraph's own
    migrations of its tables (`setup`)."""
    saver: BaseCheckpointSaver
    if url is None:
        saver = RenamingSqliteSaver(
            sqlite3.connect(home / "checkpoints.sqlite", check_same_thread=False), serde=serializer()
        )
    else:
        saver = RedactingPostgresSaver(_pool(url), serde=serializer())
        saver.where = describe(url, Path())
    saver.home, saver.inputs, saver.seen, saver.pinned, saver.trusted = home, inputs, {}, {}, {}
    saver.setup()
    return saver


logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())  # its retries are not the user's


def _pool(url: str) -> ConnectionPool[Connection[DictRow]]:
    """One connection, checked before each use and opened again when the server dropped it."""
    pool = ConnectionPool(
        url,
        connection_class=Connection[DictRow],
        min_size=1,
        max_size=1,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "connect_timeout": 10},
        check=ConnectionPool.check_connection,
        timeout=max(reconnect_seconds(), 1.0),
        name="perfloop-checkpoints",
        open=True,
    )
    try:
        pool.wait(timeout=10)
    except PoolTimeout:
        pool.close()
        raise ConfigError(
            f"cannot connect to the session store {describe(url, Path())} for its checkpoints; "
            f"check {STORE_ENV} / --store (and that the server is up)"
        ) from None
    return pool


def _redact_json(value: Any) -> Any:
    """Strings inside a JSON value (the checkpoint metadata) with known secrets masked."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redact_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_json(v) for v in value]
    return value


class RedactingPostgresSaver(Signing, Renaming, PostgresSaver):
    """PostgresSaver (reading old checkpoints' renamed channels under today's names) keeps primitive channel values (our state's plain strings) and the metadata as
    JSONB, outside the serializer: mask secrets in those too before they are written."""

    where = "the PostgreSQL store"
    """The store, for messages (no password)."""

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        values = {k: redact(v) if isinstance(v, str) else v for k, v in checkpoint["channel_values"].items()}
        clean: Checkpoint = {**checkpoint, "channel_values": values}
        return super().put(config, clean, _redact_json(metadata), new_versions)

    @contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Cursor[DictRow]]:
        """PostgresSaver's cursor; a pool that found no connection in the reconnect window is
        StoreUnreachable (the session ends as interrupted)."""
        try:
            with super()._cursor(pipeline=pipeline) as cur:
                yield cur
        except PoolTimeout as exc:
            raise StoreUnreachable(
                f"the session store {self.where} is unreachable for its checkpoints ({first_line(exc)})"
            ) from None
