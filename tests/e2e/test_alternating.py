"""Alternating arms on the CPU demo: `arms = "auto"` where the target says two servers do not fit,
the real fix (gather then cast) judged on launches of the two trees in turn, one server at a time
(C R R C): two paired blocks, each block's difference the unit (agent/decision/stats/blocks.py),
their spread the launch noise; the session replays with the same choice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.report.data import arms as report_arms
from tests.e2e.conftest import (
    assert_clean,
    edited_diff,
    git,
    last_json,
    perfloop,
    playbook_variant,
    run_playbooks,
    write_target,
)
from tests.e2e.test_adversarial import BACKEND, FIX
from tools.store.sessions import SessionStore

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_the_fix_is_judged_on_alternating_launches(tmp_path: Path, home: Path, repo: Path) -> None:
    books = tmp_path / "books"
    playbook_variant(books, "fix", 0.99, edited_diff(repo, tmp_path, {BACKEND: FIX}))
    target = write_target(tmp_path / "t.toml", repo, looks=1, arms="auto", prompts=("Explain the KV cache.",))
    decide = "two_servers_fit = false\nmax_launches_per_arm = 3\n"  # [decide] is the last table
    # one A/A launch of the baseline tree: a fresh host's first measured df for the pool
    target.write_text(target.read_text().replace("auto_aa_pairs = 0", "auto_aa_pairs = 1") + decide)
    s, shown = run_playbooks(home, target, books)
    (d,) = shown["decisions"]
    j = d["judgement"]
    assert j["arms"] == "alternating" and "arms alternating" in d["reason"], d["reason"]
    # blocks C R | R C (| C R): the candidate relaunch, the reference twice, the candidate again, ...
    n = len(j["per_launch"]) // 2
    order = ["candidate", "reference", "reference", "candidate", "candidate", "reference"]
    assert n in (2, 3) and [p["arm"] for p in j["per_launch"]] == order[: 2 * n]
    assert [p["launch_number"] for p in j["per_launch"]] == list(range(3, 3 + 2 * n))
    # a look from block 2 (the pool has 1 df); ending on a reference, the kept candidate relaunched
    assert s["server_launches"] == 2 + 2 * n + (n == 3) and len(j["looks"]) == n - 1
    lk = j["looks"][-1]
    assert (lk["requests_reference"], lk["requests_candidate"]) == (n, n)
    # the blocks' n - 1 df pooled with the baseline's A/A launch (1 df), or, where the blocks were
    # louder than that one pair, their own alone
    assert j["launch_noise"]["source"] == "pooled" and j["launch_noise"]["df"] in (n - 1, n)
    # the fix removes the whole-pool cast: far outside the spread of the blocks
    assert d["verdict"] == "accepted" and lk["ci_low"] > 1.02 and lk["speedup"] > 1.3, d["reason"]
    assert f"n = {n} paired launches per arm" in d["reason"], d["reason"]
    # the plan, before the trial: 3 blocks at most ([decide] max_launches_per_arm), 2 where the A/A
    # launch measured a noise low enough for 1.05x (CI, 2026-12-04: "enough for 1.05x")
    planned = re.search(r"paired blocks \(C R \| R C \.\.\.\): up to ([23]) blocks", json.dumps(shown))
    assert planned is not None and n <= int(planned.group(1)), json.dumps(shown)[-3000:]
    assert git(repo, "rev-list", "--count", f"main..{s['branch']}").strip() == "1"
    assert_clean(repo, s)
    assert not (home / "sessions" / s["session"] / "reference").exists()
    assert (
        s["arms"]
        == "arms auto -> alternating (the target says two servers do not fit ([decide] two_servers_fit))"
    )
    calls = SessionStore(home / "sessions.sqlite").tool_calls(s["session"])
    labels = [c.input["label"] for c in calls if c.node == "measure" and c.name == "bench.measure"]
    names = ("candidate-1", "reference-1", "reference-2", "candidate-2", "candidate-3", "reference-3")
    assert labels == [f"iteration-1-{a}" for a in names[: 2 * n]]
    # each tree's launches kept as A/A launches in one call, grouped by tree (and session),
    # beside the baseline's, so the next session's launch noise pools them
    on_shape = [c for c in calls if c.name == "aa.record" and c.input["target_key"].startswith("blocks:")]
    (kept,) = [c for c in calls if c.name == "aa.record" and c.node == "measure" and c not in on_shape]
    numbers = [p["launch_number"] for p in j["per_launch"]]
    cand = [x for x, p in zip(numbers, j["per_launch"], strict=True) if p["arm"] == "candidate"]
    ref = [x for x, p in zip(numbers, j["per_launch"], strict=True) if p["arm"] == "reference"]
    assert [x["launch_number"] for x in kept.input["more"]] == cand + ref
    stored = SessionStore(home / "sessions.sqlite").aa_samples(kept.input["target_key"])
    assert sorted(x.launch_number for x in stored) == [1, 2, *numbers]
    # and the blocks, under the engine's workload shape, for the next trial's pool
    (blocks,) = [c for c in on_shape if c.input["more"]]
    assert [x["launch_number"] for x in blocks.input["more"]] == [-c for c in cand]
    base, cand_arm, ref_arm = report_arms(calls, [])  # the candidate arm: its own launches only
    # n launches x 1 prompt x 3 requests, each timed unless a loaded client read its stream in one
    # burst (tools/bench.py sends a prompt again below 3 timed, at most 3 more times: a load-4 CI
    # had 6 of 9 when it stopped at two)
    assert base.label == "baseline" and 2 * n <= len(cand_arm.tpot_ms) <= 3 * n, cand_arm.tpot_ms
    assert ref_arm.verdict == "reference" and 2 * n <= len(ref_arm.tpot_ms) <= 3 * n  # the reference tree's
    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr
