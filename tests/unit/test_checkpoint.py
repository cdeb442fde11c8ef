"""agent/sessions/checkpoint.py: the loop state round-trips through the checkpoint serializer."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.sessions.checkpoint import serializer, state_types
from state.config.options import LoopOptions
from state.engines.sglang import SglangLayout
from state.measurement.correctness import OutputsResult
from state.measurement.measure import RequestRecord
from state.sessions.loop import LoopState
from tools.client.stats import summarize

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def test_state_types_round_trip_without_unregistered_warnings(tmp_path: Path, caplog) -> None:
    assert LoopState in state_types()
    state = LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3"),
        baseline=summarize(
            "m",
            "tree",
            [
                RequestRecord(prompt_index=0, ttft_ms=50.0, itl_ms=[t, t, t], text="a", completion_tokens=4)
                for t in (10.0, 11.0)
            ],
            1,
            wall_s=1.0,
        ),
        sglang=SglangLayout(kind="checkout", package_dir="python/sglang", version="0.5.23"),
    )
    serde = serializer()
    with caplog.at_level(logging.WARNING):
        back = serde.loads_typed(serde.dumps_typed(state))
    assert back == state
    assert not [r for r in caplog.records if "unregistered" in r.getMessage().lower()]


@pytest.mark.parametrize("moved", ["LoopOptions", "OutputsResult"])
def test_a_checkpoint_naming_a_models_old_module_loads(
    moved: str, tmp_path: Path, monkeypatch, caplog
) -> None:
    """Models moved between state modules: `LoopOptions` from the module `loop` to `options`,
    `OutputsResult` from `decision` to `correctness` (since moved into `state.sessions`,
    `state.config` and `state.measurement`). A channel value written before names the old module
    and still loads as the same model (without `moved_types` and `state.moved` in the
    allow-list the serializer refuses it, which this test saw fail: back is not the model)."""
    value, old = {
        "LoopOptions": (LoopOptions(session_dir=tmp_path, python="python3", approve="manual"), "state.loop"),
        "OutputsResult": (
            OutputsResult(sequential=["a"], concurrent=["b"], duration_s=1.5),
            "state.decision",
        ),
    }[moved]
    kind = type(value)
    serde = serializer()
    monkeypatch.setattr(kind, "__module__", old)  # written by the old layout
    written = serde.dumps_typed(value)
    monkeypatch.undo()
    assert old.encode() in written[1] and kind.__module__.encode() not in written[1]
    with caplog.at_level(logging.WARNING):
        back = serde.loads_typed(written)
    assert isinstance(back, kind) and back == value
    assert not [
        r
        for r in caplog.records
        if "unregistered" in r.getMessage().lower() or "block" in r.getMessage().lower()
    ]
