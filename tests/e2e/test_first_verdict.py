"""A first session on a new host can say "same" (issue 57): `perfloop run` from a fresh
`PERFLOOP_HOME` with the `[decide]` defaults and a comment-only patch, on the CPU demo where two
servers do not fit (`two_servers_fit = false`, as on one H100 with the glm5 preset): the baseline's
A/A launch pooled with the trial's own blocks, a look that is undecided followed by another, and
the no-op never kept: called the same (rejected as not faster) or inconclusive around 1.00. How
precise a first session gets is the machine's (+-3% on a quiet 2-core CI, wider at load 4), not
asserted here.

The engine's decode step sleeps 150 ms before its (small) compute, as a GPU host's step waits on
the device: the 2-core CI machine's load, which moves a CPU-bound demo launch by 5-15%, then moves
this one by well under 1%, the order of a GPU host's launch noise. The rule is the subject here,
not the machine (benchmarks/first_verdict_gpu.sh runs the same session on a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import assert_clean, edited_diff, git, playbook_variant, run_playbooks
from tests.e2e.test_adversarial import BACKEND, NO_OP

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

RUNNER = "mla_server/model_runner.py"
STEP = "        if isinstance(batch, StaticDecodeBatch):"
SLEEP = "        __import__('time').sleep(0.15)  # the step waits on its device\n"


def defaults_target(path: Path, repo: Path) -> Path:
    """A small demo workload with no `[decide]` setting but the host's fact that a second server
    does not fit: every decision setting at perfloop's default, as a user's new target has. Every
    decode step here waits 150 ms: one timing prompt (a launch's warm-up and 3 requests, ~5 s; two
    prompts took ~9 s, and a first session launches 6-10 times) and a 4-token correctness set (2.5 s
    at the baseline and the candidate's first launch; 16 tokens took 14 s)."""
    path.write_text(f"""
name = "first verdict"
kind = "mla_server"
repo = "{repo}"
model = "mla-demo"
[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "cpu", "--threads", "1", "--layers", "1",
        "--max-total-tokens", "2048"]
env = {{ PYTHON = "{{python}}" }}
startup_timeout_s = 120
[measure]
prompts = ["Explain the KV cache."]
max_tokens = 8
repeats = 3
[correctness]
random_prompts = 1
max_prompt_chars = 300
max_tokens = 4
concurrent = 2
long_prompts = 0
[decide]
two_servers_fit = false
""")
    return path


def test_a_no_op_in_a_first_session_is_called_the_same(tmp_path: Path, home: Path, repo: Path) -> None:
    runner = repo / RUNNER
    assert STEP in runner.read_text(), "the demo's forward_decode changed: update the test"
    runner.write_text(runner.read_text().replace(STEP, SLEEP + STEP, 1))
    git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qam", "a device-bound step")
    books = tmp_path / "books"
    playbook_variant(books, "no-op", 0.97, edited_diff(repo, tmp_path, {BACKEND: NO_OP}))
    s, shown = run_playbooks(home, defaults_target(tmp_path / "t.toml", repo), books)
    (d,) = shown["decisions"]
    j, baseline = d["judgement"], next(t["note"] for t in shown["transitions"] if t["node"] == "baseline")
    # the baseline: one look's requests, its A/A launch kept (1 df), a plan of three looks
    assert "1 prompts x 3 requests" in baseline and "1 A/A launch of the baseline tree (#1 -> #2" in baseline
    assert "up to 4 blocks (8 launches" in baseline and "3 look(s) from block 2" in baseline, baseline
    assert j["arms"] == "alternating" and j["launch_noise"]["source"] == "pooled", d["reason"]
    looks = j["looks"]
    assert all(lk["verdict"] == "undecided" for lk in looks[:-1]) and len(looks) <= 3
    # the A/A launch's df with the blocks' own (unless the blocks were louder than that one pair)
    blocks = len(j["per_launch"]) // 2
    assert j["launch_noise"]["df"] in (blocks - 1, blocks), j["launch_noise"]
    # What holds at any load: the no-op is never kept (rejected, or inconclusive). How precise the first session gets (+-3% around 1.00 here
    # quiet, [0.968, 1.02] beside two busy loops, [0.91, 1.06] in a fresh-clone CI at load 4.2) is
    # the machine's, said in benchmarks/first_verdict_gpu.sh and benchmarks/README.md, not asserted
    last = looks[-1]
    assert d["verdict"] in ("rejected", "inconclusive"), d["reason"]
    assert last["ci_low"] <= last["speedup"] <= last["ci_high"], d["reason"]
    assert s["accepted"] == [] and s["server_launches"] == 2 + 2 * blocks
    assert_clean(repo, s)
