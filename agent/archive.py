"""Export a recorded session to one file and import it elsewhere, to replay it without its host."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from pydantic import ValidationError

from state.records import ToolCallRecord
from state.session import SessionInfo
from tools.door.store import SessionStore
from tools.errors import ConfigError
from tools.secrets import redact

FORMAT = "perfloop-session/1"


def export_session(store: SessionStore, session_id: str, out: Path) -> int:
    """Write the session's index entry, inputs and non-superseded calls; returns the call count."""
    info = store.get_session(session_id)
    if info is None:
        raise ConfigError(f"no session {session_id!r} to export; list them with `perfloop sessions`")
    calls = store.tool_calls(session_id)
    doc = {
        "format": FORMAT,
        "session": info.model_dump(mode="json"),
        "initial": store.inputs(session_id, "initial"),
        "answers": store.inputs(session_id, "answer"),
        "tool_calls": [c.model_dump(mode="json") for c in calls],
    }
    data = redact(json.dumps(doc)).encode()
    out.write_bytes(gzip.compress(data) if out.suffix == ".gz" else data)
    return len(calls)


def _read(path: Path) -> dict:
    try:
        raw = path.read_bytes()
        return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (ValueError, EOFError) as exc:
        raise ConfigError(f"{path} is not a perfloop session export ({exc})") from exc


def import_session(store: SessionStore, path: Path) -> str:
    """Load an export into this store; refuses to overwrite an existing session."""
    doc = _read(path)
    if doc.get("format") != FORMAT:
        raise ConfigError(f"{path}: format {doc.get('format')!r} is not {FORMAT!r}")
    try:
        info = SessionInfo.model_validate(doc["session"])
        calls = [ToolCallRecord.model_validate(c) for c in doc["tool_calls"]]
        initial, answers = list(doc["initial"]), list(doc["answers"])
    except (KeyError, TypeError, ValidationError) as exc:
        raise ConfigError(f"{path}: malformed session export ({str(exc).splitlines()[0]})") from exc
    if store.get_session(info.id) is not None:
        raise ConfigError(f"session {info.id} already exists here; import into another PERFLOOP_HOME")
    store.put_session(info)
    for value in initial:
        store.add_input(info.id, "initial", value)
    for value in answers:
        store.add_input(info.id, "answer", value)
    for call in calls:
        store.record(call)
    return info.id
