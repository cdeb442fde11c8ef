"""agent/sessions/checkpoint.py: the loop state round-trips through the checkpoint serializer."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.sessions.reading.serde import serializer, state_types
from agent.sessions.runner import Sessions, thread
from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.engines.sglang import SglangLayout
from state.engines.workspace import WorkspaceSnapshot
from state.measurement.correctness import OutputsResult
from state.measurement.measure import Measurement, RequestRecord
from state.profiling.diagnosis import Diagnosis
from state.sessions.loop import LoopState, Proposal
from tools.client.stats import summarize
from tools.errors import ConfigError

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


BEFORE_MOVE = Path(__file__).resolve().parents[1] / "data" / "checkpoints" / "before-state-move"
"""A PERFLOOP_HOME written by perfloop before state/ was split by concern (checkpoints, session
store, the signing key of that throwaway home): `perfloop run` of tests/e2e's demo target with
`--approve manual --max-iterations 1`, paused for approval after its first proposal."""
PAUSED = "20261204-084612-3765"


def test_a_session_checkpointed_before_state_was_split_by_concern_resumes(tmp_path: Path, caplog) -> None:
    """Its checkpoint names the modules as they were (`state.loop.LoopState`, `state.measure`, ...):
    its signature checks, every value comes back as today's model (a type the serializer refused
    would come back as a plain dict, with a 'Blocked deserialization' warning), the approval it
    waits on binds the digest it was shown with, and `perfloop resume` answers with it (its engine
    checkout, at the absolute path it was made in, is not here: approving it is not run). Made by
    the code of 7a47c78; its signatures re-sealed under its own key once the digests left out
    values at their default (a field added since, `LaunchNoise.default_log`, then leaves them be)."""
    home = shutil.copytree(BEFORE_MOVE, tmp_path / "home")
    (home / "signing.key").chmod(0o600)
    raw = (home / "checkpoints.sqlite").read_bytes()
    assert b"state.loop" in raw and b"state.sessions" not in raw  # written before the move
    with caplog.at_level(logging.WARNING):
        sessions = Sessions(home)
        with pytest.raises(ConfigError, match="before perfloop signed the graph's own state") as refused:
            sessions.verify(PAUSED)  # issue 56: its graph state was not signed; the line says how on
        trust = re.search(r"repeat the command with --trust ([0-9a-f]{16}) to run it", str(refused.value))
        assert trust is not None and f"perfloop show {PAUSED}" in str(refused.value), refused.value
        sessions.trust = trust.group(1)
        sessions.verify(PAUSED)
        values = sessions.graph.get_state(thread(PAUSED)).values
        request = sessions.pending_approval(PAUSED)
    assert not [r for r in caplog.records if "unregistered" in r.getMessage() or "Blocked" in r.getMessage()]
    kinds = {"target": TargetConfig, "options": LoopOptions, "baseline": Measurement, "diagnosis": Diagnosis}
    assert {k: type(values[k]) for k in kinds} == kinds
    assert isinstance(values["proposal"], Proposal) and isinstance(values["start"], WorkspaceSnapshot)
    state = sessions.state(PAUSED)
    assert state.iteration == 1 and state.proposal is not None
    assert request is not None and request["session"] == PAUSED
    assert request["playbook"] == state.proposal.source == "kv-cache-full-pool-cast"
    assert request["digest"] == "d38f1dfb84486784"  # the approval digest it printed when it paused
    resumed = subprocess.run(
        [str(Path(sys.executable).parent / "perfloop"), "resume", PAUSED, "--trust", trust.group(1)],
        env={**os.environ, "PERFLOOP_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert resumed.returncode == 2 and f"session {PAUSED} waits for approval" in resumed.stderr, (
        resumed.stderr
    )
