"""The launch-option search on the CPU demo, through the real CLI: a search over three knobs finds
a config the decision rule keeps within its budget, and the recording replays with the same trials."""

from __future__ import annotations

from html import escape
from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, last_json, perfloop, write_target

pytestmark = pytest.mark.e2e

SEARCH = """
[search]
max_trials = 3
max_launches = 4
seed = 0

[[search.knobs]]
name = "--max-total-tokens"
type = "choice"
choices = [4096, 8192, 24576]
first = 4096

[[search.knobs]]
name = "--max-running-requests"
type = "int"
low = 1
high = 8

[[search.knobs]]
name = "--cuda-graph-max-bs"
type = "choice"
choices = [1, 2, 4, 8]
"""


def test_search_keeps_a_config_within_its_budget_and_replays(tmp_path: Path, home: Path, repo: Path) -> None:
    # the baseline's pool doubled (49152 slots), so the 4096-slot trial's win is ~6x, not ~3x: at the
    # preset's pool a loaded CI host left the 3x win inconclusive at one look (3.22x [0.97, 9.84]) and
    # at three (3.11x [0.97, 10.33] at load 4.5, the host 1.42x faster for one arm); the launch noise
    # is the 25% default (no A/A launches here), under which 80% power needs about 3.2x
    target = write_target(tmp_path / "t.toml", repo, pool_slots=49152)
    target.write_text(target.read_text() + SEARCH)
    proc = perfloop(
        home,
        "run",
        "--approve",
        "auto",
        str(target),
        "--proposer",
        "search",
        "--max-iterations",
        "1",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    assert s["status"] == "done" and s["accepted"] == ["search-1"], s
    assert s["launch_argv"][-2:] == ["--max-total-tokens", "4096"]  # the knob the diagnosis implicates
    assert s["speedup_ci"][0] > 1.02 and s["outputs_identical"] is True, s
    assert s["server_launches"] <= 4 and s["commits"] == []
    (line,) = s["search_trials"]
    assert line.startswith("search-1: --max-total-tokens 4096: TPOT ") and line.endswith("-> accepted"), line
    assert_clean(repo, s)

    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr[
        -2000:
    ]
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    assert shown["search_trials"] == s["search_trials"]
    report = perfloop(home, "report", s["session"], "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "r.html").read_text()
    assert "<th>search trials</th>" in html and escape(line) in html


WORKLOAD = """
[workload]
concurrency = 4
requests = 4
prompts = 4
input_len = [4, 12]
output_len = [4, 6]
objective = "output_throughput"
"""


def test_search_at_concurrency_judges_windows_within_minutes_and_replays(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    """One trial under `[workload]` (4 requests in flight, judged on output throughput over
    windows) and a budget in minutes: the trial is judged on windows, the summary carries the
    serving figures, and the replay reads the recorded clock (`host.clock`, read at each search
    proposal) and makes the same trial. Its verdict is not asserted: on one shared CPU thread the
    smaller pool's gain at concurrency 4 is within the launch noise (0.89x [0.57, 1.14] once)."""
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    search = SEARCH.replace("max_trials = 3", "max_trials = 1\nmax_minutes = 30")
    text = target.read_text().replace("repeats = 3", "repeats = 2")  # 2 windows per arm
    target.write_text(text + WORKLOAD + search)
    proc = perfloop(
        home,
        "run",
        "--approve",
        "auto",
        str(target),
        "--proposer",
        "search",
        "--max-iterations",
        "1",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    assert s["status"] == "done" and s["workload"].startswith("concurrency 4, 4 requests per window"), s
    assert s["serving_before"].startswith("at concurrency 4: ") and "over 2 windows" in s["serving_before"]
    assert (
        s["decision"].startswith("output throughput ")
        and "2 windows at concurrency 4 per arm" in s["decision"]
    )
    (line,) = s["search_trials"]
    assert line.startswith("search-1: --max-total-tokens 4096: output throughput "), line
    assert " tok/s, " in line
    # one not kept spends the budget of one trial; a kept one may end the one iteration first:
    # the verdict is the machine's (kept at 3.23x on a quicker one), so either ending holds
    budget, iterations = "search budget spent: 1 of 1 trials", "reached --max-iterations 1"
    assert s["stop_reason"] in ((budget, iterations) if s["accepted"] else (budget,)), s
    # the summary's speedup is the objective's (final over baseline output throughput), not TPOT's
    assert s["objective"] == "output throughput (tok/s)" and s["tpot_ms_p99_before"] >= s["tpot_ms_before"]
    # the unjudged ratio is named apart from the judged `speedup`, and only where a trial was kept
    ratio = s["objective_after"] / s["objective_before"] if s["accepted"] else None
    assert s["speedup_baseline_final"] == (pytest.approx(ratio) if ratio else None), s
    print(s["decision"], s["serving_before"], s["serving_after"], sep="\n")
    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr[
        -2000:
    ]
    report = perfloop(home, "report", s["session"], "-o", str(tmp_path / "r.html"))
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "r.html").read_text()
    assert f"<th>workload</th><td>{escape(s['workload'])}<br>baseline {escape(s['serving_before'])}" in html
    assert '<figure id="plot-objective"' in html and "output throughput, tok/s" in html
    assert "<th>TPOT p50 / p99</th>" in html
    assert f"<b>{s['speedup']:.2f}x [" in html if s["accepted"] else s["speedup"] is None
