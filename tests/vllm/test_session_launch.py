"""Session 1 on the real engine: a tiny Llama served by vLLM as users often launch it (eager, one
sequence at a time: `--enforce-eager --max-num-seqs 1`) under a serving workload of 4 requests in
flight; the launch-option search tries `--max-num-seqs 8`, the rule keeps it (output throughput),
outputs are checked, and the session replays offline. The API profile (`/start_profile`) is read
with vLLM's own step markers. Two launches of vLLM in all (~40 s each on 2 free cores)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, last_json, perfloop

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("vllm"), pytest.mark.timeout(900)]

SESSION = """
[workload]
concurrency = 4
requests = 8
prompts = 4
input_len = [8, 24]
output_len = [24, 32]
objective = "output_throughput"

[correctness]
random_prompts = 1
max_prompt_chars = 200
max_tokens = 16
concurrent = 2
long_prompts = 0

[decide]
looks = 1
arms = "sequential"
auto_aa_pairs = 0

[search]
max_trials = 1
max_launches = 2
seed = 0

[[search.knobs]]
name = "--max-num-seqs"
type = "choice"
choices = [1, 8]
"""


def test_vllm_launch_option_session_keeps_more_sequences_per_step_and_replays(
    tmp_path: Path, vllm_target
) -> None:
    target = vllm_target(
        tmp_path / "llama",
        flags=("--enforce-eager", "--max-num-seqs", "1", "--dtype", "float32"),
        extra_toml=SESSION,
    )
    text = target.read_text().replace("repeats = 3", "repeats = 2")  # 2 windows per arm
    target.write_text(text)
    home, t0 = tmp_path / "home", time.monotonic()
    proc = perfloop(
        home, "run", str(target), "--proposer", "search", "--max-iterations", "1", "--json", timeout=800
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    s = last_json(proc)
    print(
        f"\nvLLM session 1 (tiny Llama, launch options): {s['decision']}\n"
        f"  before: {s['serving_before']}\n  after:  {s['serving_after']}\n"
        f"  TPOT p50 {s['tpot_ms_before']:.2f} -> {s['tpot_ms_after']:.2f} ms; "
        f"{s['server_launches']} launches, {wall:.0f} s wall; outputs identical: {s['outputs_identical']}"
    )
    assert s["status"] == "done" and s["accepted"] == ["search-1"], s
    assert s["launch_argv"][s["launch_argv"].index("--max-num-seqs") + 1] == "8"
    assert s["speedup_ci"][0] > 1.02 and s["outputs_identical"] is True, s
    assert s["server_launches"] == 2 and s["commits"] == []
    assert_clean(Path(s["repo"]), s["branch"])
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    notes = " ".join(t["note"] for t in shown["transitions"] if t["node"] in ("profile", "diagnose"))
    assert "api profile" in notes and ".pt.trace.json" in notes, notes
    replayed = perfloop(home, "replay", s["session"], "--json")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert last_json(replayed)["matches_recording"] is True
