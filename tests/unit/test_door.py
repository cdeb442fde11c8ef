"""tools/door/live.py: the live door runs a tool and records its input, output or error, and time."""

from __future__ import annotations

import time

import pytest
from pydantic import BaseModel

from tests.recorders import MemoryRecorder
from tools.door import tool
from tools.door.live import LiveDoor as Door
from tools.errors import ToolError


class _In(BaseModel):
    x: int


class _Out(BaseModel):
    y: int


@tool("test.double")
def _double(args: _In) -> _Out:
    if args.x < 0:
        raise ToolError("negative input; pass x >= 0")
    if args.x == 3:
        time.sleep(0.05)  # a call that takes a known time
    return _Out(y=2 * args.x)


def test_door_records_outputs_and_errors() -> None:
    rec = MemoryRecorder()
    door = Door("s1", rec)
    door.node = "n"
    assert door.call(_double, _In(x=2)).y == 4
    assert door.call(_double, _In(x=3)).y == 6
    with pytest.raises(ToolError, match=r"^negative input; pass x >= 0$"):
        door.call(_double, _In(x=-1))
    with pytest.raises(TypeError, match="takes _In"):
        door.call(_double, _Out(y=1))  # type: ignore[arg-type]
    ok, slow, failed = rec.calls[0], rec.calls[1], rec.calls[2]
    assert (ok.seq, ok.node, ok.input, ok.output, ok.error) == (0, "n", {"x": 2}, {"y": 4}, None)
    assert failed.output is None and failed.error == "ToolError: negative input; pass x >= 0"
    assert slow.duration_s >= 0.05 and ok.duration_s < slow.duration_s, (ok.duration_s, slow.duration_s)


def test_a_replay_takes_a_float_that_differs_only_in_its_last_bits() -> None:
    """A value computed from recorded numbers on another machine rounds its last bits differently
    (an H200 host's A/A shift, 0.00040950605150384217 there and 0.0004095060515035461 here); a
    difference a measurement could make is still one."""
    from tools.door.replay import first_difference

    there, here = 0.00040950605150384217, 0.0004095060515035461
    assert first_difference({"shift_log": there}, {"shift_log": here}) is None
    assert first_difference({"shift_log": there}, {"shift_log": there * (1 + 1e-9)}) is not None
    assert first_difference({"n": 3}, {"n": 4}) is not None
