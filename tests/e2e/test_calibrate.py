"""`perfloop calibrate`: A/A launches of the demo tree kept in the store, for either arms."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import git, last_json, perfloop, write_target
from tools.store.sessions import SessionStore

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.mark.parametrize("arms", ["sequential", "interleaved"])
def test_calibrate_keeps_a_a_samples(tmp_path: Path, home: Path, repo: Path, arms: str) -> None:
    target = write_target(tmp_path / "t.toml", repo, arms=arms, looks=1)
    proc = perfloop(home, "calibrate", str(target), "--launches", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = last_json(proc)
    assert out["paired"] is (arms == "interleaved") and out["launches"] == 2 and out["source"] == "default"
    # two launches of one tree never measure the same TPOT: a zero would mean they were not pooled
    # as one tree (an estimate over no degrees of freedom); over 1.0 (a 2.7x SD) would be nonsense
    assert out["estimate_log"] is not None and 0 < out["estimate_log"] < 1.0, out
    # published: each A/A comparison judged with the others' noise (two pairs: each with the
    # other's; two single launches: one comparison with no other noise, not judged), and the
    # smallest gain kept with this noise
    assert out["aa_comparisons"] == (2 if arms == "interleaved" else 0), out
    assert abs(out["nominal_rate"] - 0.05) < 1e-9 and out["smallest_gain_kept"] > 1.02, out
    assert "false calls: " in proc.stdout + proc.stderr
    store = SessionStore.open(home)
    try:
        calls = store.tool_calls(out["calibration"])
    finally:
        store.close()
    launched = [c for c in calls if c.name == "server.launch" and c.error is None]
    assert len(launched) == (4 if arms == "interleaved" else 2)  # a pair is two launches at once
    pairs = [c for c in calls if c.name == "bench.measure_pair"]
    assert len(pairs) == (2 if arms == "interleaved" else 0)
    assert git(repo, "status", "--porcelain") == ""  # the tree it measured is untouched
    assert "worktree" not in git(repo, "worktree", "list").split("\n", 1)[-1]  # no copy left behind
