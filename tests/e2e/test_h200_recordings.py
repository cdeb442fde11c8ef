"""The loop's sessions recorded on one H200 (benchmarks/h200-2026-11-30) replay offline here with the
same decisions, and this checkout's gain model predicts each accepted fix within 25%."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.sessions.archive import import_session
from agent.sessions.runner import Sessions

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
EXPECTED = {  # folder/run: (accepted, rejected)
    "h200-2026-11-30/a-graphs": (["kv-cache-full-pool-cast"], ["decode-step-fusion"]),
    "h200-2026-11-30/b-eager": (["launch-bound-decode", "kv-cache-full-pool-cast"], ["decode-step-fusion"]),
    "h200-2026-11-30/b2-eager": (["launch-bound-decode", "kv-cache-full-pool-cast"], []),
    # decided by the CI rule (IQR-rule sessions above replay with the rule they were decided by)
    "h200-2026-11-30-ci-rule/c-graphs-ci": (["kv-cache-full-pool-cast"], []),
    "h200-2026-11-30-ci-rule/c-eager-ci": (["launch-bound-decode", "kv-cache-full-pool-cast"], []),
    # profiled by the API method (/start_profile, forward_decode windows), eager at the start
    "h200-2026-12-01-api-method/d-api-eager": (["launch-bound-decode", "kv-cache-full-pool-cast"], []),
    "h200-2026-12-01-api-method/e-api-eager": (["launch-bound-decode", "kv-cache-full-pool-cast"], []),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_h200_session_replays_with_the_same_decisions(name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path))
    sessions = Sessions()
    sid = import_session(sessions.store, BENCH / f"{name}-session.json.gz")
    state, summary = sessions.replay(sid)
    accepted, rejected = EXPECTED[name]
    assert summary.accepted == accepted and summary.rejected == rejected
    assert summary.tpot_ms_after is not None and summary.speedup is not None
    assert summary.outputs_identical and summary.tpot_ms_after < 20 and summary.speedup > 4
    assert summary.launch_argv[-4:] == ["--preset", "glm5", "--device", "cuda"]  # graphs on at the end
    for d in state.decisions:
        if d.verdict == "accepted":
            assert d.tpot_ms_before is not None and d.tpot_ms_after is not None
            realized = d.tpot_ms_before / d.tpot_ms_after
            assert d.predicted_speedup == pytest.approx(realized, rel=0.25), d


def test_the_tp2_session_on_two_h200s_replays_and_its_gain_is_predicted_per_rank(
    tmp_path: Path, monkeypatch
) -> None:
    """The loop at `--tp-size 2` on nvidia-h200-x2 (benchmarks/h200x2-2026-12-04-tp2): the cast fix
    kept with identical outputs, replayed offline with the same decision; its gain predicted from
    the two ranks' merged profile per rank (the kernels summed over both ranks once read as twice
    the step: 28x predicted for a 5x fix)."""
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path))
    sessions = Sessions()
    sid = import_session(sessions.store, BENCH / "h200x2-2026-12-04-tp2" / "tp2-session.json.gz")
    state, summary = sessions.replay(sid)
    assert summary.accepted == ["kv-cache-full-pool-cast"] and summary.rejected == []
    assert summary.outputs_identical and summary.speedup is not None and summary.speedup > 4
    assert summary.launch_argv[-2:] == ["--tp-size", "2"] and state.target.tp_size == 2
    (d,) = state.decisions
    assert d.tpot_ms_before is not None and d.tpot_ms_after is not None
    assert d.predicted_speedup == pytest.approx(d.tpot_ms_before / d.tpot_ms_after, rel=0.25), d
