"""What this machine signed of each session, kept under $PERFLOOP_HOME (never in the store): the
number of the latest checkpoint it signed (`seq`, its id) and the pending writes it left on that
checkpoint. A store peer can delete rows: a signed checkpoint older than this machine's latest,
read back as the session's latest, is a rollback, and a pending write this machine wrote that is
gone (an interrupt, a rejection's answer) was deleted. Both are refused before anything runs
(agent/sessions/checkpoint.py, docs/SECURITY.md "A store peer")."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from tools.errors import ToolError
from tools.paths import session_id as checked_id

FOLDER = "signed"
"""The ledger's folder under $PERFLOOP_HOME: one JSON file per session."""


def _path(home: Path, session_id: str) -> Path:
    return home / FOLDER / f"{checked_id(session_id)}.json"


def read(home: Path, session_id: str) -> dict:
    """{"seq": int, "checkpoint": id, "writes": {"TASK|IDX": [channel, digest]}}, or {} if none."""
    try:
        doc = json.loads(_path(home, session_id).read_text())
    except (OSError, ValueError, ToolError):  # none yet, unreadable, or not a session's id
        return {}
    return doc if isinstance(doc, dict) else {}


def _write(home: Path, session_id: str, doc: dict) -> None:
    path = _path(home, session_id)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")  # one per writer
    tmp.write_text(json.dumps(doc, sort_keys=True))
    os.replace(tmp, path)


def signed_checkpoint(home: Path, session_id: str, seq: int, checkpoint_id: str) -> None:
    """This machine signed the session's checkpoint `checkpoint_id`, number `seq` (its writes none yet)."""
    _write(home, session_id, {"seq": seq, "checkpoint": checkpoint_id, "writes": {}})


def signed_writes(
    home: Path, session_id: str, checkpoint_id: str, writes: list[tuple[str, str, str, bool]]
) -> None:
    """This machine wrote pending writes (slot `TASK|IDX`, channel, value digest, whether the slot
    is overwritten by a later write as LangGraph does for interrupts and resumes) on the session's
    latest checkpoint `checkpoint_id` (writes on another checkpoint are not kept)."""
    doc = read(home, session_id)
    if doc.get("checkpoint") != checkpoint_id:
        return
    kept = doc.setdefault("writes", {})
    for slot, channel, digest, replaces in writes:
        if replaces or slot not in kept:
            kept[slot] = [channel, digest]
    _write(home, session_id, doc)


def next_seq(home: Path, session_id: str, seen: int) -> int:
    """The number of the session's next checkpoint: past this machine's and past `seen` (the
    highest signed number read back, another of the user's machines' included)."""
    return max(int(read(home, session_id).get("seq", 0) or 0), seen) + 1
