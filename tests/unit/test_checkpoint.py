"""agent/sessions/checkpoint.py: the loop state round-trips through the checkpoint serializer."""

from __future__ import annotations

import logging
from pathlib import Path

from agent.cli.target import load_target
from agent.sessions.checkpoint import serializer, state_types
from state.loop import LoopOptions, LoopState
from state.measure import RequestRecord
from state.sglang import SglangLayout
from tools.bench import summarize

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
