"""One A/A launch without asking (agent/decision/arms/aalaunches.py): the baseline step of a sequential
session on the real demo server, with too few A/A launches stored for a measured launch noise,
launches the tree once more, keeps both launches through the door, and its power line and launch
noise are the measured ones; the store then holds enough, so a later session launches none."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from agent.cli.target import load_target
from agent.context import LoopContext, call
from agent.decision.arms.aalaunches import wants_launch
from agent.decision.rules.ci import CiRule
from agent.decision.stats.noise import target_key
from agent.serving import start_server
from state.config.options import LoopOptions
from state.door.calls import ServerArgs
from state.measurement.aa import AARecordArgs, AASample
from state.sessions.loop import LoopState
from tests.e2e.conftest import make_repo, write_target
from tests.procs import processes_in
from tests.recorders import MemoryRecorder
from tools import server
from tools.door.live import LiveDoor
from tools.store import aa


def test_a_sequential_baseline_launches_once_more_while_no_launch_noise_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "engine")
    path = write_target(tmp_path / "t.toml", repo, looks=1, arms="sequential", prompts=("Hi.",))
    path.write_text(path.read_text().replace("auto_aa_pairs = 0", "auto_aa_pairs = 1"))
    target = load_target(path)
    key = target_key(target)
    for i, loc in enumerate([3.00, 3.02, 3.01, 2.99], start=1):  # another session's: 4 of the 6 needed
        sample = AASample(
            target_key=key, group="g0", session_id="s0", launch_number=i, location_log=loc, requests=3
        )
        aa.record(AARecordArgs(target_key=key, sample=sample))
    opts = LoopOptions(
        session_dir=tmp_path / "session", python=sys.executable, decision_rule="ci-v1", power=True,
        aa_evidence=True,
    )  # fmt: skip
    state = LoopState(session_id="s1", target=target, options=opts)
    calls = MemoryRecorder()
    runtime = Runtime(context=LoopContext(door=LiveDoor("s1", calls)))
    runtime.context.door.node = "baseline"
    first = start_server(state, runtime, instrumented=False)
    state = state.model_copy(update={"server": first, "launches": first.launch_number})
    running = first
    try:
        measured = CiRule().baseline(state, runtime)
        running = measured.update.get("server") or first
    finally:
        call(runtime, server.stop, ServerArgs(server=running, grace_s=5))
    assert processes_in(repo) == [], "a server was left running"

    names = [c.name for c in calls.calls]
    assert names.count("server.launch") == 2 and names.count("server.stop") == 2, names
    second = [i for i, n in enumerate(names) if n == "server.launch"][1]
    assert names.index("server.stop") < second  # one server at a time
    assert running.launch_number == 2 and measured.update.get("launches") == 2
    assert measured.measurement.label == "baseline-aa" and len(measured.measurement.requests) == 3
    assert "; 1 A/A launch of the baseline tree (#1 -> #2: shift " in measured.note
    mine = [s for s in aa.record(AARecordArgs(target_key=key)).samples if s.session_id == "s1"]
    assert [s.launch_number for s in mine] == [1, 2] and mine[0].group == mine[1].group
    noise, power = measured.update.get("launch_noise"), measured.update.get("power")
    assert noise is not None and noise.source == "aa" and noise.launches == 6 and noise.df == 4
    assert power is not None and power.noise == noise and "6 A/A launches" in measured.note
    later = state.model_copy(update={"session_id": "s2"})
    assert not wants_launch(later, aa.record(AARecordArgs(target_key=key)).samples, 1)
