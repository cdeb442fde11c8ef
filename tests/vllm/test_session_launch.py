"""Session 1 on the real vLLM engine, from its documented command: docs/VLLM.md's `### Session 1`
commands (the README's `make vllm-demo` step, the same line), read from the files and run verbatim
in the repository's root with a fresh PERFLOOP_HOME, as a user who cloned it would.

The target (tools/vllm/cases.py `llama`) is launched as users often start: `--enforce-eager
--max-num-seqs 1` (one sequence per decode step) while the workload keeps 8 requests in flight. The
API profile reads vLLM's phase scopes (host-bound or model-bound decode: which one depends on the
machine's load, so the test asserts the line, not the verdict); the launch-option search (one knob:
`--max-num-seqs`, choices 1 or 8, so its one trial is 8 whether the diagnosis implicates the knob
or TPE picks it) predicts the trial's output-throughput gain bound (`batching_gain_bound`: min(8,
8) / min(8, 1) = 8x), relaunches it beside the reference (interleaved arms), checks its greedy
outputs (exact policy: a seeded random checkpoint in float32) and judges the windows' output
throughput. The rule keeps it; the documented `perfloop replay last` replays it offline. What the
session printed is checked too: one judged speedup at the head, no impossible 0.0 ms figure, the
best configuration whole and without perfloop's own flags, what to run next.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, last_json, perfloop
from tests.vllm.documented import ROOT, readme_vllm_commands, run, session_commands

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2400), pytest.mark.xdist_group("vllm")]

USER_PATH = {"PATH": f"{ROOT / '.venv' / 'bin'}:{os.environ['PATH']}"}
"""The environment of a user who made the venv (`perfloop` on PATH)."""


def test_the_search_keeps_more_sequences_per_step_within_its_predicted_bound_and_replays(
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    lines = session_commands(1)
    assert lines[0] in readme_vllm_commands(), (lines, readme_vllm_commands())  # the README's step
    home = tmp_path / "home"
    printed = run(lines, home, 2200, USER_PATH)
    wall = time.monotonic() - t0
    shown = last_json(perfloop(home, "show", "last", "--json"))
    s = shown["session"]["summary"]
    repo = home / "vllm-demo" / "llama" / "vllm"
    notes = {t["node"]: t["note"] for t in shown["transitions"]}

    # the API profile's phase scopes, read in the diagnosis
    assert "decode over" in notes["diagnose"] and "forward" in notes["diagnose"], notes["diagnose"]
    assert s["profile_method"] == "api"

    (trial,) = shown["decisions"]
    assert trial["playbook"] == "search-1" and trial["launch_argv"][-2:] == ["--max-num-seqs", "8"], trial
    assert trial["predicted_speedup"] == 8.0  # min(8, 8) / min(8, 1) at 8 requests in flight
    # timing texts at concurrency move with the schedule: not compared text by text (None); the
    # correctness set judged the outputs (alone exactly)
    assert trial["verdict"] == "accepted" and trial["outputs_identical"] is None, trial["reason"]
    assert "outputs identical alone" in trial["reason"], trial["reason"]
    look = trial["judgement"]["looks"][-1]
    # the bound holds: what the windows realized lies within what batching can give
    assert 1.0 < look["ci_low"] <= 8.0, look
    assert (
        s["accepted"] == ["search-1"]
        and s["commits"] == []
        and s["launch_argv"][-2:] == ["--max-num-seqs", "8"]
    )
    (line,) = shown["search_trials"]
    assert (
        line.startswith("search-1: --max-num-seqs 8: output throughput ")
        and "(predicted at most 8.00x)" in line
    )
    assert_clean(repo, s)

    assert "same summary as recorded" in printed[-1], printed[-1][-2000:]  # `perfloop replay last`
    # what the session printed: the judged speedup heads, the figures are possible, the best
    # configuration is whole and copyable, and the next step is named
    table = printed[0]
    lines_out = table.splitlines()
    title = next(n for n, r in enumerate(lines_out) if r.startswith("perfloop session "))
    speed = lines_out[title + 1]  # the summary's first row, its key then its value (issue 63's layout)
    assert speed.startswith("speedup ") and f"{look['speedup']:.2f}x [" in speed, speed
    assert " 0.0 ms" not in table and "TPOT 0.0" not in table, table[-3000:]
    at = lines_out.index("best configuration, to copy:") + 1
    end = next(n for n in range(at, len(lines_out)) if not lines_out[n].endswith(" \\"))
    best = "\n".join(lines_out[at : end + 1]).replace(" \\\n", " ").strip()  # as a shell reads it
    assert shlex.split(best)[-2:] == ["--max-num-seqs", "8"] and "{port}" not in best, best
    assert "profiler-config" not in best and "…" not in best, best
    assert re.search(rf"next: \S*perfloop show {s['session']}", table), table[-2000:]  # the one that runs
    print(
        f"\nvLLM tiny Llama launch-option session (session 1): output throughput "
        f"{s['objective_before']:.1f} -> {s['objective_after']:.1f} tok/s at concurrency 8, judged "
        f"{look['speedup']:.2f}x (95% CI [{look['ci_low']:.2f}, {look['ci_high']:.2f}]) against a "
        f"predicted bound of 8.00x; TPOT p50 {s['tpot_ms_before'] or 0:.2f} -> {s['tpot_ms_after'] or 0:.2f} ms; "
        f"{s['server_launches']} launches, {wall:.0f} s wall"
    )
    print(json.dumps({"diagnose": notes["diagnose"][-300:], "trial": line}))
