"""What a checkpoint read back is checked against, in one place (`Checking.why`), and the digest
`perfloop show` prints and `--trust` takes (`Checking.shown_digest`); agent/sessions/trust/saver.py
calls them before a command acts and wherever the graph reads (docs/SECURITY.md, "A store peer")."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from agent.sessions.trust import ledger
from agent.sessions.trust.signing import (
    ANOTHER_KEY,
    GRAPH,
    SEQ,
    SIGNATURE,
    digests,
    graph_digest,
    key_here,
    ours,
    problem,
    signs_writes,
    unsigned_writes,
)
from state.sessions.loop import LoopState

WRITE_SIGNATURE = "write-signature"
"""The kind of the session store's inputs that hold its pending writes' signatures."""
FIX = (
    "nothing was run: it cannot continue from the store (`perfloop replay` still plays its "
    "recording); start a new session with `perfloop run`"
)


def spliced_from(home: Path, key: bytes | None, record: object) -> str | None:
    """The session (of those this machine signed, `ledger.py`'s folder) whose signature under
    this key `record` is: a copy or a splice of this user's own session, or None."""
    if not key or not isinstance(record, dict):
        return None
    for path in sorted((home / ledger.FOLDER).glob("*.json"))[-500:]:
        if ours(key, path.stem, record) is not None:
            return path.stem
    return None


def state_values(found: CheckpointTuple) -> dict | None:
    """The checkpoint's state fields, or None for one before the first step (no session yet)."""
    values = {k: v for k, v in found.checkpoint["channel_values"].items() if k in LoopState.model_fields}
    return values if {"session_id", "target", "options"} <= values.keys() else None


def _value_digest(typed: tuple[str, bytes]) -> str:
    return hashlib.sha256(typed[0].encode() + typed[1]).hexdigest()


def write_where(config: RunnableConfig, task_id: str | None) -> dict[str, str]:
    """What a pending write is bound to: its session, checkpoint (and task)."""
    c = config["configurable"]
    where = {k: str(c.get(k) or "") for k in ("thread_id", "checkpoint_ns", "checkpoint_id")}
    return where if task_id is None else {**where, "task_id": task_id}


def checkpoint_id_of(found: CheckpointTuple) -> str:
    return str(found.config["configurable"]["checkpoint_id"])


class Checking(BaseCheckpointSaver):
    """The checks of a signing checkpointer (mixed in under `saver.Signing`)."""

    home: Path | None = None
    """Where the user's key is (made at the first checkpoint); None: nothing signed."""
    inputs: Any = None
    """The session store the write signatures are kept in (a SessionStore); None: writes not signed."""
    seen: dict[str, int]
    """The highest checkpoint number of each session read back under this key (its next is past it)."""
    trusted: dict[str, str]
    """Checkpoint ids accepted by `--trust` (not this key's), with the digest they were accepted at."""

    def shown_digest(self, found: CheckpointTuple) -> str:
        """The digest `perfloop show` prints and `--trust` takes: every state field's digest, the
        graph's (next nodes, pending tasks with their `Send`s, channel versions) and every pending
        write's (task, channel, value)."""
        fields = digests(LoopState.model_validate(state_values(found)))
        graph = graph_digest(found.checkpoint, found.config, found.parent_config, self.serde.dumps_typed)
        writes = sorted(
            [str(t), str(c), _value_digest(self.serde.dumps_typed(v))]
            for t, c, v in found.pending_writes or []
        )
        what = json.dumps({"fields": fields, "graph": graph, "writes": writes}, sort_keys=True)
        return hashlib.sha256(what.encode()).hexdigest()[:16]

    def signed_here(self, config: RunnableConfig) -> dict:
        """The ledger of the session `config` names, to be read BEFORE the store is: a writer puts
        a checkpoint or a pending write in the store first and in the ledger after, so all that a
        ledger read first holds is in what the store returns next, unless a peer deleted it. Read
        after, a writer that moved on in between (a running session, read by `show`, the approval
        page or a test polling it) looked like a rollback or a deleted write."""
        sid = config.get("configurable", {}).get("thread_id")
        return ledger.read(self.home, str(sid)) if self.home is not None and sid else {}

    def why(
        self, found: CheckpointTuple, latest: bool, fields: bool = True, local: dict | None = None
    ) -> str | None:
        """Why a checkpoint of a session is not what this user's key signed (its signature, every
        state field, its graph, its pending writes; read as the session's latest, not older than
        what this machine signed last: `local`, `signed_here` read before `found` was), or None.
        The one check, for `verify` and every read; `fields` False (a read outside any command,
        e.g. `show`'s): this key's checkpoints' graph, number and writes only, the rest left to
        `show` to name."""
        assert self.home is not None
        sid, cid = str(found.config["configurable"]["thread_id"]), checkpoint_id_of(found)
        latest = latest and not found.config["configurable"].get("checkpoint_ns")
        local = (ledger.read(self.home, sid) if local is None else local) if latest else {}
        values, key = state_values(found), key_here(self.home)
        if values is None:  # before the first step: only a rollback if this machine signed later ones
            if local.get("seq"):
                return (
                    f"session {sid} was rolled back in the store: its latest checkpoint is its first "
                    f"(before any step), this machine signed number {local['seq']} (a store peer "
                    f"deleted the later ones)"
                )
            return None
        if cid in self.trusted:
            if self.shown_digest(found) != self.trusted[cid]:
                return f"session {sid} changed in the store after --trust accepted checkpoint {cid}"
            return None
        record = (found.metadata or {}).get(SIGNATURE)
        now = digests(LoopState.model_validate(values))
        if not fields and (ours(key, sid, record) or {}).get(GRAPH) is None:
            return None  # not this key's, or signed before the graph was: named by `show`
        if (
            fields
            and (why := problem(key, sid, record if isinstance(record, dict) else None, now, self.home))
            is not None
        ):
            seq = local.get("seq")
            older = local.get("checkpoint") and cid < str(local["checkpoint"])
            if seq and older and ours(key, sid, record) is None:
                return f"session {sid} was rolled back in the store to an earlier checkpoint ({why})"
            if why.endswith(ANOTHER_KEY) and (other := spliced_from(self.home, key, record)) is not None:
                return why.replace(
                    ANOTHER_KEY, f"its signature is this user's key's for another session ({other})"
                )
            return why
        signed = ours(key, sid, record) or {}
        if (
            graph_digest(found.checkpoint, found.config, found.parent_config, self.serde.dumps_typed)
            != signed[GRAPH]
        ):
            return (
                f"session {sid} changed in the store since this user last ran it: its graph state "
                f"(the step that runs next, channel versions, pending tasks) is not what this user's key signed"
            )
        seq = int(signed.get(SEQ, "0") or 0)
        if latest and seq < int(local.get("seq", 0) or 0):
            return (
                f"session {sid} was rolled back in the store: its latest checkpoint is number {seq}, "
                f"this machine signed number {local['seq']} (a store peer deleted the later ones)"
            )
        if latest and local.get("checkpoint") == cid:
            there = {
                (t, c, _value_digest(self.serde.dumps_typed(v))) for t, c, v in found.pending_writes or []
            }
            gone = [
                f"{channel} (task {slot.split('|')[0][:8]})"
                for slot, (channel, digest) in sorted(local.get("writes", {}).items())
                if (slot.split("|")[0], channel, digest) not in there
            ]
            if gone:
                return (
                    f"session {sid} changed in the store since this user last ran it: its last step's "
                    f"pending write {', '.join(gone[:4])} that this machine wrote was deleted"
                )
        if found.pending_writes and self.inputs is not None and signs_writes(key, sid, record):
            signed = self.inputs.inputs(sid, WRITE_SIGNATURE)
            where = write_where(found.config, None)
            if bad := unsigned_writes(
                key or b"", where, found.pending_writes, signed, self.serde.dumps_typed
            ):
                return (
                    f"session {sid} changed in the store since this user last ran it: its last step's "
                    f"pending write {', '.join(bad[:4])} is not signed by this user's key"
                )
        self.seen[sid] = max(self.seen.get(sid, 0), seq)
        return None

    def signed_as_is(self, found: CheckpointTuple) -> bool:
        """Whether this key signed the checkpoint's state fields as they are (its graph aside)."""
        sid, record = str(found.config["configurable"]["thread_id"]), (found.metadata or {}).get(SIGNATURE)
        now = digests(LoopState.model_validate(state_values(found)))
        return (
            problem(key_here(self.home or Path()), sid, record if isinstance(record, dict) else None, now)
            is None
        )

    def status(self, config: RunnableConfig) -> tuple[str | None, str | None, dict]:
        """(the digest `--trust` takes, why the checkpoint is not this key's or None, what runs
        next: `upcoming`), for `show`."""
        local = self.signed_here(config)  # first (`signed_here`)
        found = super().get_tuple(config)
        if found is None or self.home is None or state_values(found) is None:
            return None, "no checkpoint", {"tasks": [], "writes": []}
        return self.shown_digest(found), self.why(found, latest=True, local=local), self.upcoming(found)

    def upcoming(self, found: CheckpointTuple) -> dict:
        """What the graph runs from this checkpoint besides its state (pure): every pending task
        a `Send` made (its node, the argv of the target it carries and its diff) and every pending
        write (its task, channel and value, cut at 300 characters), as `show` prints them."""
        tasks = []
        for send in found.checkpoint["channel_values"].get("__pregel_tasks") or []:
            arg = getattr(send, "arg", None)
            arg = arg if isinstance(arg, dict) else getattr(arg, "__dict__", {})
            target = arg.get("target")
            launch = target.get("launch", {}) if isinstance(target, dict) else getattr(target, "launch", None)
            argv = launch.get("argv") if isinstance(launch, dict) else getattr(launch, "argv", None)
            node = str(getattr(send, "node", send))
            tasks.append({"node": node, "argv": argv, "diff": arg.get("diff")})
        writes = [
            {"task": str(t)[:8], "channel": str(c), "value": repr(v)[:300]}
            for t, c, v in found.pending_writes or []
        ]
        return {"tasks": tasks, "writes": writes}
