"""The states of a recording's replay, kept so that `show` and `report` of an imported recording,
and `replay` of any session, read them without LangGraph and without replaying it again (issue 63):
`$PERFLOOP_HOME/replayed/SESSION.jsonl.gz`, one line for the key and the replay's summary, then
one state per line, oldest first, as `Sessions.history` gives them.

A replay reads nothing but the recording and perfloop (tests/integration/test_recordings_replay.py),
so the key is the digest of the two: the session's inputs and tool calls as the store holds them,
perfloop's sources (`agent`, `state`, `tools`, `playbooks`: each file's size and change time), and
the versions of Python and of the libraries the graph runs on. A file of another key (the recording
or perfloop changed since) is not read: the recording is replayed again and the file replaced. A
replay that diverged from its recording is never kept (replaying.py `run`), nor a session whose
engine is not one of perfloop's own (its code is another package's), nor states that hold a secret
known here (`tools.secrets`: the store and the checkpoints hold none either). Light: no LangGraph,
no graph."""

from __future__ import annotations

import gzip
import hashlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from state.config.target import TARGET_KINDS
from tools.paths import session_id as checked_id

if TYPE_CHECKING:
    from state.sessions.loop import LoopState
    from state.sessions.session import Summary
    from tools.store.sessions import SessionStore

ROOT = Path(__file__).resolve().parents[3]
"""The repository (this module is agent/sessions/reading/replayed.py)."""
SOURCES = ("agent", "state", "tools", "playbooks")
"""perfloop's packages, whose files the key digests."""
LIBRARIES = (
    "langgraph",
    "langgraph-checkpoint",
    "langchain-core",
    "pydantic",
    "pydantic-core",
    "numpy",
    "optuna",
)
"""The libraries a replay runs on, whose versions the key holds (numpy: the decision rules'
statistics; optuna: the launch-option search's sampler)."""


def sources_digest() -> str:
    """The digest of perfloop's source files: each one's path, size and change time, as Python's
    own bytecode cache tells a changed source (a stat each: reading them all would cost more)."""
    digest = hashlib.sha256()
    for pkg in SOURCES:
        for folder, subfolders, files in os.walk(ROOT / pkg):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
            for name in sorted(files):
                seen = os.stat(os.path.join(folder, name))
                where = os.path.relpath(os.path.join(folder, name), ROOT)
                digest.update(f"{where}\0{seen.st_size}\0{seen.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "-"


def key(store: SessionStore, session_id: str) -> str | None:
    """The key of the session's replay as it would run here; None when it is not kept (its engine
    is not perfloop's, or it has no initial state)."""
    initial = store.inputs(session_id, "initial")
    kind = initial[0].get("target", {}).get("kind") if initial and isinstance(initial[0], dict) else None
    if kind not in TARGET_KINDS:  # the engines perfloop ships; another's code is not digested here
        return None
    libraries = " ".join(f"{name}={_version(name)}" for name in LIBRARIES)
    made = f"python={sys.version}\n{libraries}\nsources={sources_digest()}\n"
    return hashlib.sha256(made.encode() + store.recording_digest(session_id).encode()).hexdigest()


def _file(home: Path, session_id: str) -> Path:
    return home / "replayed" / f"{checked_id(session_id)}.jsonl.gz"


def _kept(home: Path, session_id: str, made: str | None, last: bool) -> tuple[list[LoopState], str] | None:
    """(the states kept under the key `made`, `last`: the latest alone; the summary kept beside the
    key as JSON, "" in a file that holds none), or None."""
    from state.sessions.loop import LoopState

    if made is None:
        return None
    try:
        lines = gzip.decompress(_file(home, session_id).read_bytes()).split(b"\n")
        kept, _, summary = lines[0].decode().partition(" ")
        if kept != made or len(lines) < 2:
            return None
        return [LoopState.model_validate_json(line) for line in (lines[-1:] if last else lines[1:])], summary
    except (OSError, EOFError, ValueError):  # none, cut short, or not ours (a ValidationError too)
        return None


def read(home: Path, session_id: str, made: str | None, last: bool = False) -> list[LoopState] | None:
    """The states kept for the session under the key `made` (with `last`: the latest alone), or
    None when none are kept under it (or the file does not read back)."""
    kept = _kept(home, session_id, made, last)
    return None if kept is None else kept[0]


def outcome(home: Path, session_id: str, made: str | None) -> tuple[LoopState, Summary] | None:
    """The last state and the summary of the replay kept under the key `made` (the summary is the
    loop's rules over the state, its status and the recording, all under the key: read back, their
    modules and LangGraph, which they import, stay unloaded), or None when none is kept under it."""
    from state.sessions.session import Summary

    try:
        kept = _kept(home, session_id, made, last=True)
        return None if kept is None or not kept[1] else (kept[0][-1], Summary.model_validate_json(kept[1]))
    except ValueError:  # a summary that does not read back: the graph runs again
        return None


def keep(
    home: Path, session_id: str, made: str | None, states: Sequence[LoopState], summary: Summary
) -> None:
    """Keep the replay's `states` and its `summary` under the key `made` (nothing when None, no
    state, or a state holding a known secret); a file that cannot be written is left out (the next
    read replays)."""
    from tools.secrets import redact

    if made is None or not states:
        return
    text = "\n".join([f"{made} {summary.model_dump_json()}", *(state.model_dump_json() for state in states)])
    if redact(text) != text:
        return
    path = _file(home, session_id)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        partial.write_bytes(gzip.compress(text.encode(), compresslevel=1))
        os.replace(partial, path)  # whole or not at all: a reader never sees half of it
    except OSError:
        partial.unlink(missing_ok=True)
