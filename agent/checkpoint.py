"""LangGraph checkpointing: SQLite in $PERFLOOP_HOME, our state types allow-listed."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sqlite3
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

import state
from tools.secrets import redact_bytes


def _state_modules() -> list:
    """Every module of the `state` package (new ones are picked up without editing this list)."""
    return [importlib.import_module(f"state.{m.name}") for m in pkgutil.iter_modules(state.__path__)]


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


def serializer() -> JsonPlusSerializer:
    """A serializer that revives exactly our state types (no 'unregistered type' warnings) and
    scrubs secrets from what it writes."""
    return RedactingSerializer(allowed_msgpack_modules=state_types())


def open_checkpointer(home: Path) -> SqliteSaver:
    """The SqliteSaver for all sessions, in `home/checkpoints.sqlite`."""
    conn = sqlite3.connect(home / "checkpoints.sqlite", check_same_thread=False)
    saver = SqliteSaver(conn, serde=serializer())
    saver.setup()
    return saver
