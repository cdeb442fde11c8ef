"""state/sessions/updates.py: a node's update type names exactly LoopState's fields, with their types."""

from __future__ import annotations

from typing import get_type_hints

from state.sessions.loop import LoopState
from state.sessions.updates import LoopUpdate


def test_loop_update_has_exactly_the_fields_of_loop_state() -> None:
    assert set(LoopUpdate.__annotations__) == set(LoopState.model_fields)
    assert not LoopUpdate.__required_keys__  # any subset is an update


def test_loop_update_types_are_the_fields_types() -> None:
    hints = get_type_hints(LoopUpdate)
    assert {k: f.annotation for k, f in LoopState.model_fields.items()} == hints
