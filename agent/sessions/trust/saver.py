"""The checkpointer's one check at the point of use, pinned (docs/SECURITY.md, "A store peer").

`Signing` (mixed in before a LangGraph saver, agent/sessions/checkpoint.py) signs each checkpoint
of a session it writes: the digests of its state's fields, of the whole checkpoint as LangGraph
stores it (`GRAPH`) and its number in the session (`SEQ`), under this user's key, in the
checkpoint's metadata; and each pending write (`seal_write`, kept as the session's
`write-signature` inputs). What it signed is also kept under $PERFLOOP_HOME (`ledger.py`).

`verify` is the one check before a command acts on a session: the checkpoint (this key's
signature, every state field's digest, the graph digest, every pending write, not older than the
latest this machine signed) or, for a session this key did not sign, `--trust` with the digest of
what `perfloop show` printed (`shown_digest`: the fields, the graph and the pending writes). The
id it verified is then pinned: while this process acts on the session, every checkpoint the
graph reads (`get_tuple`, `list`, their pending writes) is checked again where it is read, and
the thread's head must be one this process verified or wrote itself; a checkpoint newer than the
verified one, or an unsigned one in a signed thread, is refused naming what changed. A checkpoint
or a pending write is signed only after one this process verified or wrote: nothing it did not
verify is ever signed by it."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from agent.sessions.trust import ledger
from agent.sessions.trust.checking import (
    FIX,
    WRITE_SIGNATURE,
    Checking,
    checkpoint_id_of,
    state_values,
    write_where,
)
from agent.sessions.trust.signing import (
    GRAPH,
    SEQ,
    SIGNATURE,
    WRITES,
    check,
    digests,
    graph_digest,
    key_here,
    ours,
    seal,
    seal_write,
    user_key,
)
from state.sessions.loop import LoopState
from tools.errors import ConfigError


class Signing(Checking):
    """Signs what it writes, checks what it reads (the module's docstring)."""

    pinned: dict[str, set[str]]
    """The sessions this process acts on: the checkpoint ids it verified or wrote in each."""
    _lock = threading.Lock()

    # -- the check before acting, and the pin ----------------------------------------------------

    def verify(self, config: RunnableConfig, trust: str | None, pin: bool = True) -> RunnableConfig | None:
        """Check the checkpoint `config` names (the session's latest without an id) once, here,
        and pin it: its config (with its id), or None when it has no state yet. Refused in one
        line naming what changed, unless `trust` is `shown_digest` of what it holds now (then
        accepted at that digest, and the session's other checkpoints as they are when read)."""
        assert self.home is not None
        sid = str(config["configurable"]["thread_id"])
        local = self.signed_here(config)  # before the store (checking.py `signed_here`)
        found = super().get_tuple(config)
        if found is None:
            return None
        latest = not config["configurable"].get("checkpoint_id")
        values, why = state_values(found), self.why(found, latest, local=local)
        if why is not None and (values is None or "rolled back" in why or self.signed_as_is(found)):
            raise ConfigError(f"{why}; {FIX}")  # this key's fields, its graph or writes not: no --trust
        if values is None:
            return None
        if why is not None:
            shown = self.shown_digest(found)
            if not any(c in self.trusted for c in self.pinned.get(sid, ())):  # else: trusted already
                check(
                    sid, values, dict(found.metadata or {}), self.home, trust, shown, why
                )  # raises unless trusted
            self.trusted[checkpoint_id_of(found)] = shown
        if pin:  # (not by a process that only checks, and lives on: the approval page's server)
            self.pinned.setdefault(sid, set()).add(checkpoint_id_of(found))
        return found.config

    def _head(self, sid: str) -> CheckpointTuple | None:
        """The thread's latest checkpoint (the listing closed at once: one pooled connection)."""
        listing = super().list({"configurable": {"thread_id": sid, "checkpoint_ns": ""}}, limit=1)
        try:
            return next(iter(listing), None)
        finally:
            getattr(listing, "close", lambda: None)()

    def _read(
        self, found: CheckpointTuple, head: CheckpointTuple | None, full: bool, local: dict | None = None
    ) -> None:
        """Check a checkpoint read while this process acts on its session (`pinned`): the thread's
        `head` one this process verified or wrote, and `found` as `why` says (`full`: read to be
        used, `local` the ledger read before it; listed, only this key's checkpoints are checked:
        the others are verified before use)."""
        sid = str(found.config["configurable"]["thread_id"])
        if found.config["configurable"].get("checkpoint_ns"):
            return
        pins = self.pinned[sid]
        if head is not None and checkpoint_id_of(head) not in pins:
            record = (head.metadata or {}).get(SIGNATURE)
            kind = "not signed by this user's key"
            if ours(key_here(self.home or Path()), sid, record) is not None:
                kind = "signed by this user's key, not verified by this process"
            raise ConfigError(
                f"session {sid} changed in the store after it was verified: its latest checkpoint is "
                f"{checkpoint_id_of(head)} ({kind}), not {max(pins)}, the one verified; {FIX}"
            )
        latest = full and head is not None and checkpoint_id_of(head) == checkpoint_id_of(found)
        if state_values(found) is not None and (why := self.why(found, latest, full, local)):
            raise ConfigError(f"{why}; {FIX}")

    # -- LangGraph's saver -----------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        local = self.signed_here(config)  # before the store (checking.py `signed_here`)
        found = super().get_tuple(config)
        if found is None or self.home is None:
            return found
        sid = str(found.config["configurable"]["thread_id"])
        latest = not config.get("configurable", {}).get("checkpoint_id")
        if sid in self.pinned:
            self._read(found, found if latest else self._head(sid), full=True, local=local)
        elif state_values(found) is not None and (why := self.why(found, latest, False, local)) is not None:
            raise ConfigError(f"{why}; {FIX}")
        return found

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> Iterator[CheckpointTuple]:
        heads: dict[str, CheckpointTuple | None] = {}
        for found in [*super().list(config, **kwargs)]:  # read whole: the pool has one connection
            sid = str(found.config["configurable"]["thread_id"])
            if self.home is not None and sid in self.pinned:
                head = heads[sid] if sid in heads else heads.setdefault(sid, self._head(sid))
                self._read(found, head, full=False)
            yield found

    def _signable(self, config: RunnableConfig) -> None:
        """Refuse to sign after a checkpoint this process did not verify or write."""
        c = config["configurable"]
        sid, parent = str(c["thread_id"]), c.get("checkpoint_id")
        if parent and not c.get("checkpoint_ns") and parent not in self.pinned.get(sid, set()):
            raise ConfigError(
                f"session {sid}: checkpoint {parent} was not verified by this process, so nothing after "
                f"it is signed; nothing was run"
            )

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        kept: list[tuple[str, str, str, bool]] = []
        if self.home is not None and self.inputs is not None and writes:  # signed first: a reader
            self._signable(config)
            key, where = user_key(self.home), write_where(config, task_id)  # never sees one unsigned
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
            self._signable(config)
            fields = digests(
                LoopState.model_validate({k: v for k, v in values.items() if k in LoopState.model_fields})
            )
            if self.inputs is not None:
                fields[WRITES] = "signed"
            if not config["configurable"].get("checkpoint_ns"):
                seq = ledger.next_seq(self.home, sid, self.seen.get(sid, 0))
                fields[SEQ] = str(seq)
            fields[GRAPH] = graph_digest(checkpoint, config, config, self.serde.dumps_typed)
            metadata = {**metadata, SIGNATURE: seal(user_key(self.home), sid, fields)}  # type: ignore[misc]
        if not config["configurable"].get("checkpoint_ns"):  # written here: its own (before its
            self.pinned.setdefault(sid, set()).add(checkpoint["id"])  # tasks' writes, which may come first)
        out = super().put(config, checkpoint, metadata, new_versions)
        if seq and self.home is not None:
            with self._lock:
                ledger.signed_checkpoint(self.home, sid, seq, checkpoint["id"])
            self.seen[sid] = seq
        return out
