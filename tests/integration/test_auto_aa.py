"""A/A pairs without asking (agent/decision/calibration/autoaa.py): the baseline step of an interleaved session
launches the tree again beside the real demo server, keeps each pair in the store through the
door, and reports its power; a store that already holds enough pairs costs no launch."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from langgraph.runtime import Runtime

from agent.cli.target import load_target
from agent.context import LoopContext, call
from agent.decision.arms.measuring import budget, measure_arm, record_aa
from agent.decision.calibration.autoaa import powered
from agent.decision.stats.noise import UPPER_BOUND, chi2_quantile, target_key
from agent.serving import start_server
from state.config.options import LoopOptions
from state.door.calls import ServerArgs
from state.measurement.aa import AARecordArgs, AASample
from state.measurement.decision import LaunchNoise
from state.sessions.loop import LoopState
from tests.e2e.conftest import make_repo, write_target
from tests.procs import processes_in
from tests.recorders import MemoryRecorder
from tools import server
from tools.door.live import LiveDoor
from tools.store import aa
from tools.store.sessions import SessionStore, perfloop_home


def test_an_interleaved_baseline_gathers_its_own_aa_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pair beside the baseline completes the store's two (one another session kept), a later
    session launches none; both pooled into the bound; sequential arms sized past their
    measured requests get the reference topped up on the same launch; no server left behind."""
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "engine")
    path = write_target(tmp_path / "t.toml", repo, looks=1, arms="interleaved", prompts=("Hi.",))
    path.write_text(path.read_text().replace("auto_aa_pairs = 0", "auto_aa_pairs = 3\nmin_aa_pairs = 2"))
    target = load_target(path)
    earlier = AASample(  # one pair another session kept: one more makes the 2 needed
        target_key=target_key(target), group="g", session_id="s0", launch_number=2, beside=1,
        location_log=3.0, requests=12, shift_log=0.01,
    )  # fmt: skip
    store = SessionStore.open(perfloop_home())
    store.add_aa(earlier)
    store.close()
    opts = LoopOptions(
        session_dir=tmp_path / "session", python=sys.executable, decision_rule="ci-v1", power=True
    )
    state = LoopState(session_id="s1", target=target, options=opts)
    calls = MemoryRecorder()
    runtime = Runtime(context=LoopContext(door=LiveDoor("s1", calls)))
    runtime.context.door.node = "baseline"
    base = start_server(state, runtime, instrumented=False)
    state = state.model_copy(update={"server": base, "launches": base.launch_number})
    try:
        m = measure_arm(state, runtime, "baseline", budget(state), warm_up=True)
        first = powered(state, runtime, m, record_aa(state, runtime, m))
        later = first.state.model_copy(update={"session_id": "s2"})  # a later session on this host
        again = powered(later, runtime, m, first.noise)  # finds enough pairs stored: launches none
        assert processes_in(repo) and processes_in(first.state.options.session_dir) == []
        # sequential arms sized for a gain their 6 requests cannot resolve: the reference topped up
        decide = target.decide.model_copy(
            update={"arms": "sequential", "min_gain": 0.0, "keep_gain": 1e-4, "max_requests_per_prompt": 6}
        )
        sequential = state.model_copy(update={"target": target.model_copy(update={"decide": decide})})
        topped = powered(sequential, runtime, m, LaunchNoise(sigma_log=0.0))
    finally:
        call(runtime, server.stop, ServerArgs(server=base, grace_s=5))
    assert processes_in(repo) == [], "a server was left running"

    names = [c.name for c in calls.calls]
    assert names.count("server.launch") == 2 and names.count("bench.measure_pair") == 1, names
    assert first.state.launches == 2 and again.state.launches == 2
    assert first.note.startswith("1 A/A pair(s) beside the baseline") and again.note == ""
    assert "power before them" in first.note  # with the one stored pair: the 5% default
    pairs = [
        s for s in aa.record(AARecordArgs(target_key=earlier.target_key)).samples if s.shift_log is not None
    ]
    assert [(s.session_id, s.launch_number, s.beside) for s in pairs] == [("s0", 2, 1), ("s1", 2, 1)]
    # the new pair's shift pooled with the stored one: sigma^2 = sum(shift^2) / 4, its 90% bound on 2 df
    noise = first.noise
    assert noise.paired and noise.source == "aa" and noise.launches == 2
    sd = math.sqrt((0.01**2 + (pairs[1].shift_log or 0.0) ** 2) / 4)
    assert noise.estimate_log == pytest.approx(sd)
    assert noise.sigma_log == pytest.approx(max(sd * math.sqrt(2 / chi2_quantile(1 - UPPER_BOUND, 2)), 0.005))
    assert (topped.power.repeats, topped.power.looks, len(m.requests)) == (6, 1, 3)
    assert len(topped.measurement.requests) == 6 and topped.state.target.measure.repeats == 6
    assert "a budget of 6 requests per prompt cannot resolve 1.000x" in topped.power.line()
    assert names.count("bench.measure") == 2  # the baseline, and its top-up on the same launch
    p = first.power
    assert p.keeps > 1.02 and p.repeats == 3 and p.looks == 1 and p.spread_log > 0
    assert (
        p.line().startswith(f"power: keeps gains >= {p.keeps:.3f}x") and "2 interleaved A/A pairs" in p.line()
    )
