"""LangGraph checkpointing: SQLite in $PERFLOOP_HOME, or LangGraph's PostgresSaver on the database
of $PERFLOOP_STORE (shared by every machine on it); our state types allow-listed, secrets masked.
PostgresSaver takes its connection from a one-connection pool that checks it before each use, so a
connection the server dropped (a restart) is opened again, waited for up to the store's reconnect
window (tools/store/db.py), past which it is `StoreUnreachable`."""

from __future__ import annotations

import hashlib
import inspect
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg import Connection, Cursor
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from pydantic import BaseModel

import state
from agent.sessions.trust import ledger
from agent.sessions.trust.signing import (
    GRAPH,
    SEQ,
    SIGNATURE,
    WRITES,
    digests,
    graph_digest,
    key_here,
    ours,
    seal,
    seal_write,
    signs_writes,
    unsigned_writes,
    user_key,
)
from state.sessions.loop import LoopState
from tools.errors import ConfigError, first_line
from tools.secrets import redact, redact_bytes
from tools.store.db import STORE_ENV, StoreUnreachable, describe, reconnect_seconds
from tools.store.sessions import SessionStore

WRITE_SIGNATURE = "write-signature"
"""The kind of the session store's inputs that hold its pending writes' signatures."""


def _state_modules() -> list:
    """Every module of the `state` package and its sub-packages (`state.modules`)."""
    return state.modules()


def state_types() -> list[type]:
    """Every pydantic model defined in our state modules: the serializer's allow-list."""
    return [
        obj
        for mod in _state_modules()
        for _, obj in inspect.getmembers(mod, inspect.isclass)
        if issubclass(obj, BaseModel) and obj.__module__ == mod.__name__
    ]


class RedactingSerializer(JsonPlusSerializer):
    """JsonPlusSerializer whose output has every secret value known at write time masked
    (`tools.secrets.redact_bytes`): checkpoints never hold a secret, even one a server printed."""

    def dumps_typed(self, obj: object) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        return kind, redact_bytes(data)


def moved_types() -> list[tuple[str, str]]:
    """(module, name) of every state model a state module imports from another one: a checkpoint
    written before a model moved names it where it was (e.g. `state.sessions.loop.LoopOptions`, now in
    `state.config.options` and still imported there), and must load."""
    return [
        (mod.__name__, name)
        for mod in _state_modules()
        for name, obj in inspect.getmembers(mod, inspect.isclass)
        if issubclass(obj, BaseModel)
        and obj.__module__ != mod.__name__
        and obj.__module__.startswith("state.")
    ]


def serializer() -> JsonPlusSerializer:
    """A serializer that revives exactly our state types (no 'unregistered type' warnings) and
    scrubs secrets from what it writes."""
    return RedactingSerializer(allowed_msgpack_modules=[*state_types(), *moved_types(), *state.moved()])


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


class Signing(BaseCheckpointSaver):
    """Signs each checkpoint of a session it writes (agent/sessions/trust/signing.py): the digests of
    its state's fields, of the whole checkpoint as LangGraph stores it (`GRAPH`: channel values
    and versions, `versions_seen`, pending tasks, its id and parent's) and its number in the
    session (`SEQ`), with their HMAC under this user's key, in the checkpoint's metadata; and each
    pending write (`seal_write`, kept as the session's `write-signature` inputs in `inputs`). What
    it signed is also kept under $PERFLOOP_HOME (`ledger.py`). A checkpoint of this key is read
    back only as signed: its graph state unchanged, not older than the latest this machine signed
    (when read as the latest: a rollback), every pending write signed and none this machine wrote
    missing. Anything else is refused in one line before anything runs."""

    home: Path | None = None
    """Where the user's key is (made at the first checkpoint); None: nothing signed."""
    inputs: SessionStore | None = None
    """The session store the write signatures are kept in; None: writes not signed."""
    seen: dict[str, int]
    """The highest checkpoint number of each session read back under this key (its next is past it)."""
    _lock = threading.Lock()

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        kept: list[tuple[str, str, str, bool]] = []
        if self.home is not None and self.inputs is not None and writes:  # signed first: a reader
            key, where = user_key(self.home), _where(config, task_id)  # never sees one unsigned
            special = all(c in WRITES_IDX_MAP for c, _ in writes)  # LangGraph overwrites these
            with self._lock:  # branches of a parallel batch write at once
                for i, (channel, value) in enumerate(writes):
                    record = seal_write(key, where, channel, self.serde.dumps_typed(value))
                    self.inputs.add_input(where["thread_id"], WRITE_SIGNATURE, record)
                    slot = f"{task_id}|{WRITES_IDX_MAP.get(channel, i)}"
                    kept.append((slot, channel, record["value"], special))
        super().put_writes(config, writes, task_id, task_path)
        if kept and self.home is not None and not where["checkpoint_ns"]:
            with self._lock:
                ledger.signed_writes(self.home, where["thread_id"], where["checkpoint_id"], kept)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        asked = str(config.get("configurable", {}).get("thread_id", ""))
        # The ledger first, then the store: what the ledger says was written (committed before
        # the ledger was) is then in what the store gives, even while another process writes.
        local = ledger.read(self.home, asked) if self.home is not None and asked else {}
        found = super().get_tuple(config)
        if found is None or self.home is None:
            return found
        sid, key = str(found.config["configurable"]["thread_id"]), key_here(self.home)
        fields = ours(key, sid, (found.metadata or {}).get(SIGNATURE))
        if key is not None and fields is not None and GRAPH in fields:
            self._check_graph(sid, config, found, fields, local if sid == asked else {})
        if not found.pending_writes or self.inputs is None or key is None:
            return found
        if not signs_writes(key, sid, (found.metadata or {}).get(SIGNATURE)):  # older, or not ours
            return found
        where = _where(found.config, None)
        signed = self.inputs.inputs(sid, WRITE_SIGNATURE)
        if bad := unsigned_writes(key, where, found.pending_writes, signed, self.serde.dumps_typed):
            raise ConfigError(
                f"session {sid} changed in the store since this user last ran it: its last step's "
                f"pending write {', '.join(bad[:4])} is not signed by this user's key; nothing was run"
            )
        return found

    def _check_graph(
        self, sid: str, asked: RunnableConfig, found: CheckpointTuple, fields: dict[str, str], local: dict
    ) -> None:
        """Refuse a checkpoint this key signed whose graph state changed since, or (read as the
        session's latest) that is older than this machine's latest, or that lost a pending write
        this machine wrote (`ledger.py`)."""
        assert self.home is not None
        now = graph_digest(found.checkpoint, found.config, found.parent_config, self.serde.dumps_typed)
        fix = (
            "nothing was run: it cannot continue from the store (`perfloop replay` still plays its "
            "recording); start a new session with `perfloop run`"
        )
        if now != fields[GRAPH]:
            raise ConfigError(
                f"session {sid} changed in the store since this user last ran it: its graph state "
                f"(the step that runs next, channel versions, pending tasks) is not what this user's "
                f"key signed; {fix}"
            )
        if found.config["configurable"].get("checkpoint_ns"):
            return
        seq = int(fields.get(SEQ, "0") or 0)
        latest = not asked.get("configurable", {}).get("checkpoint_id")
        if latest and seq < int(local.get("seq", 0) or 0):
            raise ConfigError(
                f"session {sid} was rolled back in the store: its latest checkpoint is number {seq}, "
                f"this machine signed number {local['seq']} (a store peer deleted the later ones); {fix}"
            )
        if latest and local.get("checkpoint") == found.checkpoint["id"]:
            there = {
                (t, c, _value_digest(self.serde.dumps_typed(v))) for t, c, v in found.pending_writes or []
            }
            gone = [
                f"{channel} (task {slot.split('|')[0][:8]})"
                for slot, (channel, digest) in sorted(local.get("writes", {}).items())
                if (slot.split("|")[0], channel, digest) not in there
            ]
            if gone:
                raise ConfigError(
                    f"session {sid} changed in the store since this user last ran it: its last "
                    f"step's pending write {', '.join(gone[:4])} that this machine wrote was deleted; {fix}"
                )
        self.seen[sid] = max(self.seen.get(sid, 0), seq)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        values = checkpoint["channel_values"]
        seq = 0
        sid = str(config["configurable"]["thread_id"])
        if self.home is not None and {"session_id", "target", "options"} <= values.keys():
            state_values = {
                k: v for k, v in values.items() if k in LoopState.model_fields
            }  # no graph channels
            fields = digests(LoopState.model_validate(state_values))
            if self.inputs is not None:
                fields[WRITES] = "signed"
            if not config["configurable"].get("checkpoint_ns"):
                seq = ledger.next_seq(self.home, sid, self.seen.get(sid, 0))
                fields[SEQ] = str(seq)
            fields[GRAPH] = graph_digest(checkpoint, config, config, self.serde.dumps_typed)
            metadata = {**metadata, SIGNATURE: seal(user_key(self.home), sid, fields)}  # type: ignore[misc]
        out = super().put(config, checkpoint, metadata, new_versions)
        if seq and self.home is not None:
            with self._lock:
                ledger.signed_checkpoint(self.home, sid, seq, checkpoint["id"])
            self.seen[sid] = seq
        return out


def _value_digest(typed: tuple[str, bytes]) -> str:
    return hashlib.sha256(typed[0].encode() + typed[1]).hexdigest()


def _where(config: RunnableConfig, task_id: str | None) -> dict[str, str]:
    """What a pending write is bound to: its session, checkpoint (and task)."""
    c = config["configurable"]
    where = {k: str(c.get(k) or "") for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}
    return where if task_id is None else {**where, "task_id": task_id}


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
    saver.home, saver.inputs, saver.seen = home, inputs, {}
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
