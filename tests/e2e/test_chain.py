"""A chain on the CPU demo (`--proposer chain`): one session keeps a launch option from `[search]`
and the builtin cast fix's patch, each judged against the tree before it, then measures the whole
chain (the final tree and launch command against the baseline's, launched afresh and judged), and
replays offline with the same chain."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, kept_unless_drifted, last_json, perfloop, write_target

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SEARCH = """
# the launch's pool doubled (--pool-slots 49152, below) and the knob's first value a sixth of it: each
# link then removes ~5x of the step on this CPU at one layer, so each clears its interval under the
# default 25% launch noise (at the preset's pool the patch after 4096 slots judged 2.90x [1.09, 7.41])
[search]
max_trials = 1
seed = 0

[[search.knobs]]
name = "--max-total-tokens"
type = "choice"
choices = [8192, 49152]
first = 8192
"""


def test_chain_keeps_a_launch_option_and_a_patch_and_measures_the_whole(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    # looks=3: the second link can need a second look on a loaded machine (host drift widens its CI)
    target = write_target(tmp_path / "t.toml", repo, looks=3, pool_slots=49152)
    target.write_text(target.read_text() + SEARCH)
    proc = perfloop(
        home, "run", "--approve", "auto", str(target), "--proposer", "chain", "--max-iterations", "2",
        "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    # Round 1 ranks the pool knob (implicated by the cast finding, its prediction a bound) beside the
    # patch: a tie goes to the launch option. Round 2's profile still shows the smaller pool's cast.
    if s["status"] == "done" and s["accepted"] == ["search-1"]:  # the patch's arms on a drifting host
        detail = last_json(perfloop(home, "show", s["session"], "--json"))
        (fix,) = [d for d in detail["decisions"] if d["label"] == "kv-cache-full-pool-cast"]
        # inconclusive only for the load (a fresh-clone CI: the host ran 1.70x faster for one arm,
        # 3.30x [0.89, 13.57]); the chain's own measurement needs both links, so it ends here
        assert not kept_unless_drifted(False, fix["reason"])
        assert_clean(repo, s)
        return
    assert s["status"] == "done" and s["accepted"] == ["search-1", "kv-cache-full-pool-cast"], s
    assert s["launch_argv"][-2:] == ["--max-total-tokens", "8192"] and len(s["commits"]) == 1, s
    chain = s["chain"]
    links = chain["links"]
    assert [link["kind"] for link in links] == ["launch option", "patch"], links
    for link in links:  # each judged against the tree before it, and kept on its interval
        assert link["verdict"] == "accepted" and link["ci"][0] > 1.0 and link["speedup"] > 1.0, link
    assert links[1]["tpot_ms_before"] == pytest.approx(links[0]["tpot_ms_after"]), links
    whole = chain["whole"]
    assert whole is not None and whole["problem"] is None, whole
    j = whole["judgement"]
    last = j["looks"][-1]
    assert (
        j["verdict"] == "accepted"
        and last["ci_low"] > 1.0
        and last["ci_low"] <= last["speedup"] <= last["ci_high"]
    )
    # measured, not multiplied: its own arms (the baseline's median against the fresh launch's)
    assert whole["tpot_ms_before"] == pytest.approx(s["tpot_ms_before"])
    assert whole["launch_argv_before"][-2:] != ["--max-total-tokens", "8192"]
    assert whole["launch_argv_after"] == s["launch_argv"] and whole["commit_before"] is not None
    assert last["speedup"] > max(link["speedup"] for link in links), (last, links)
    assert s["server_launches"] >= 4  # the baseline, two candidates, the chain's own launch
    assert_clean(repo, s)

    text = " ".join(proc.stderr.split())  # the summary table a person reads (stdout holds the JSON)
    assert "search-1 (launch option)" in text and "kv-cache-full-pool-cast (patch)" in text
    assert "whole chain" in text and f"{last['speedup']:.2f}x" in text
    detail = last_json(perfloop(home, "show", s["session"], "--json"))
    assert detail["chain"] == chain
    (ran,) = [t["note"] for t in detail["transitions"] if t["node"] == "chain"]
    assert ran.startswith("whole chain (the chain: search-1 -> kv-cache-full-pool-cast): "), ran
    (ranked,) = [t["note"] for t in detail["transitions"] if t["node"] == "propose"][:1]
    assert "ranked by predicted gain per launch-minute: search-1 " in ranked, ranked

    report = perfloop(home, "report", s["session"], "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "r.html").read_text()
    assert "<th>chain</th>" in html and "whole chain" in html and f"{last['speedup']:.2f}x" in html

    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    again = last_json(replayed)
    assert again["matches_recording"] is True and again["chain"] == chain
