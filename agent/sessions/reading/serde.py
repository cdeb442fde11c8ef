"""How checkpoints serialize our state: LangGraph's JsonPlusSerializer reviving exactly our state
types, secrets masked in what it writes. The checkpointers use it (checkpoint.py), and so does a
replay in memory (replaying.py), which loads no checkpointer, database driver or signing."""

from __future__ import annotations

import inspect

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

import state
from tools.secrets import redact_bytes


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
