"""Export a recorded session to one file and import it elsewhere, to replay it without its host.

An export is untrusted input (recordings are meant to be shared): import reads at most
`MAX_EXPORT_BYTES` (decompressed), checks every part before writing anything (the session id
against the one pattern, every record and input against its model, one session id throughout,
unique call numbers) and then writes it in one go; anything wrong is one `ConfigError` line.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from state.door.records import ToolCallRecord
from state.sessions.fanout import BatchApproval
from state.sessions.loop import LoopState
from state.sessions.session import SessionInfo
from tools.errors import ConfigError, first_line
from tools.paths import session_id as checked_id
from tools.secrets import redact
from tools.store.db import describe as describe_store
from tools.store.sessions import SessionStore

FORMAT = "perfloop-session/1"
MAX_EXPORT_BYTES = 256 * 1024 * 1024
"""Largest export (decompressed) import reads: a recording is megabytes, not gigabytes."""


def export_session(store: SessionStore, session_id: str, out: Path) -> int:
    """Write the session's index entry, inputs and non-superseded calls; returns the call count."""
    info = store.get_session(checked_id(session_id))
    if info is None:
        raise ConfigError(f"no session {session_id!r} to export; list them with `perfloop sessions`")
    calls = store.tool_calls(session_id)
    doc = {
        "format": FORMAT,
        "session": info.model_dump(mode="json"),
        "initial": store.inputs(session_id, "initial"),
        "answers": store.inputs(session_id, "answer"),
        "cuts": store.inputs(session_id, "cut"),  # where a resume numbered launches past a cut attempt's
        "tool_calls": [c.model_dump(mode="json") for c in calls],
    }
    data = redact(json.dumps(doc)).encode()
    try:
        out.write_bytes(gzip.compress(data) if out.suffix == ".gz" else data)
    except OSError as exc:
        raise ConfigError(f"--output: cannot write {out}: {exc.strerror or exc}") from exc
    return len(calls)


def _read(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_EXPORT_BYTES + 1)
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.GzipFile(fileobj=io.BytesIO(raw)).read(MAX_EXPORT_BYTES + 1)
        if len(raw) > MAX_EXPORT_BYTES:
            raise ConfigError(
                f"{path}: larger than {MAX_EXPORT_BYTES >> 20} MiB; not a perfloop session export"
            )
        return json.loads(raw)
    except OSError as exc:
        if isinstance(exc, gzip.BadGzipFile):
            raise ConfigError(f"{path} is not a perfloop session export (bad gzip: {exc})") from exc
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (ValueError, EOFError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else first_line(exc)
        raise ConfigError(f"{path} is not a perfloop session export ({reason})") from exc


def _field(doc: dict, name: str, kind: type) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind):
        raise ConfigError(
            f"malformed session export: field `{name}` must be a JSON {'list' if kind is list else 'object'}, "
            f"not {type(value).__name__}"
        )
    return value


def _validated(model: type[BaseModel], value: Any, field: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in (field, *err["loc"]))
        raise ConfigError(
            f"malformed session export: field `{where}`: {err['msg'].removeprefix('Value error, ')}"
        ) from None
    except RecursionError:
        raise ConfigError(f"malformed session export: field `{field}` is nested too deeply") from None


def parse_export(doc: Any) -> tuple[SessionInfo, list[dict], list[dict], list[ToolCallRecord]]:
    """Check an export document completely (pure); ConfigError naming the first bad field."""
    if not isinstance(doc, dict):
        raise ConfigError(
            f"not a perfloop session export: the top level is a JSON {type(doc).__name__}, not an object"
        )
    if doc.get("format") != FORMAT:
        raise ConfigError(f"session export format {str(doc.get('format'))[:40]!r} is not {FORMAT!r}")
    session = _field(doc, "session", dict)
    checked_id(session.get("id"), "session export field `session.id`")
    info = _validated(SessionInfo, session, "session")
    initial, answers = _field(doc, "initial", list), _field(doc, "answers", list)
    for i, value in enumerate(initial):
        state = _validated(LoopState, value, f"initial.{i}")
        if state.session_id != info.id:
            raise ConfigError(f"malformed session export: field `initial.{i}.session_id` is not {info.id}")
    for i, value in enumerate(answers):
        _validated(BatchApproval, value, f"answers.{i}")  # to one proposal, or to a batch
    calls = [
        _validated(ToolCallRecord, c, f"tool_calls.{i}")
        for i, c in enumerate(_field(doc, "tool_calls", list))
    ]
    seqs = [c.seq for c in calls]
    if any(c.session_id != info.id for c in calls) or len(set(seqs)) != len(seqs):
        raise ConfigError("malformed session export: tool calls of another session, or repeated call numbers")
    return info, initial, answers, calls


def parse_cuts(doc: dict) -> list[dict]:
    """The export's `cuts` (none in exports made before them), each `{"seq": N, "launch": N}`."""
    cuts = doc.get("cuts", [])
    ok = isinstance(cuts, list) and all(
        isinstance(c, dict) and set(c) == {"seq", "launch"} and all(type(v) is int for v in c.values())
        for c in cuts
    )
    if not ok:
        raise ConfigError('malformed session export: field `cuts` must be a list of {"seq": N, "launch": N}')
    return cuts


def import_session(store: SessionStore, path: Path) -> str:
    """Load an export into this store; refuses to overwrite an existing session."""
    try:
        doc = _read(path)
        info, initial, answers, calls = parse_export(doc)
        cuts = parse_cuts(doc)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if str(path) not in str(exc) else str(exc)) from None
    if store.get_session(info.id) is not None:
        other = "another PERFLOOP_HOME" if store.url is None else "another database (--store)"
        where = describe_store(store.url, store.path.parent)
        raise ConfigError(f"session {info.id} already exists in {where}; import into {other}")
    refused: tuple[type[Exception], ...] = (ValueError, *store.db.errors)
    try:
        with store.db.transaction():  # all of it or nothing: never a half-written session
            store.put_session(info)
            for value in initial:
                store.add_input(info.id, "initial", value)
            for value in answers:
                store.add_input(info.id, "answer", value)
            for value in cuts:
                store.add_input(info.id, "cut", value)
            for call in calls:
                store.record(call)
    except refused as exc:  # what the database refuses (a NUL byte in Postgres)
        raise ConfigError(f"{path}: the store refused it, nothing was imported: {first_line(exc)}") from None
    return info.id
