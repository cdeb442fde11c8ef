"""Fixes by launch options on the CPU demo: proposed, applied as the candidate's launch command,
measured, rolled back or kept in the session (no commit), then replayed offline; the acceptance
confirmed on a second pair of launches (forced by `confirm_below`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import assert_clean, git, last_json, perfloop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]  # six launches, the confirming pair included

SIGNATURE = """
[signature]
op_names = ['^aten::copy_$', '^aten::to$', '^aten::_to_copy$']
min_share = 0.2
dims_rank = 3
dims_tail = [1, 576]
first_dim_over_active_tokens_min = 8.0

[gain]
kind = "cast_fraction"
"""


def launch_playbook(books: Path, pid: str, confidence: float, flag: str) -> None:
    """A playbook with the pool-cast signature whose fix for mla_server removes a launch flag."""
    folder = books / pid
    folder.mkdir(parents=True)
    (folder / "playbook.toml").write_text(
        f'id = "{pid}"\ntitle = "test: remove {flag}"\nconfidence = {confidence}\n'
        f'explanation = "test"\nevidence_note = "{{op}}"\n{SIGNATURE}\n'
        f'[[launch.mla_server]]\nflag = "{flag}"\naction = "remove"\n'
    )


def test_launch_option_fixes_are_measured_rolled_back_or_kept_and_replay(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    books = tmp_path / "books"
    launch_playbook(books, "launch-changes-outputs", 1.0, "--seed")  # other weights: outputs change
    launch_playbook(books, "launch-smaller-pool", 0.99, "--pool-slots")  # half the pool to cast
    target = tmp_path / "t.toml"
    target.write_text(f"""
name = "e2e launch options"
kind = "mla_server"
repo = "{repo}"
model = "mla-demo"
[launch]
argv = ["bash", "launch.sh", "--port", "{{port}}", "--preset", "cpu", "--threads", "1", "--layers", "1", "--seed", "1", "--pool-slots", "49152"]
env = {{ PYTHON = "{{python}}" }}
startup_timeout_s = 120
[measure]
prompts = ["Explain the KV cache.", "Write a haiku about GPUs."]
max_tokens = 8
repeats = 3
[correctness]
long_prompts = 0  # CI: the demo's CPU prefills near its 1024-token limit cost tens of seconds (tests/e2e/test_long_context.py runs them at 256)
# The correctness set of tests/e2e/conftest.write_target: run three times here (baseline, each
# candidate) on a server casting twice the pool, at the defaults (2 random prompts up to 600 chars,
# 40 tokens, 3 at once) it took 27-37 s each; the changed weights still differ from the first token.
random_prompts = 1
max_prompt_chars = 300
max_tokens = 16
concurrent = 2
[profile]
method = "patch"
[decide]
arms = "interleaved"  # each reference runs beside its candidate, from the same tree, old options
confirm_below = 1000.0  # every acceptance is judged again on a fresh pair of launches
auto_aa_pairs = 0  # no A/A pairs beside the baseline: the launch count is the fixes' alone
""")
    proc = perfloop(
        home,
        "run",
        "--approve",
        "auto",
        str(target),
        "--json",
        "--playbooks",
        str(books),
        "--max-iterations",
        "1",
        timeout=1200,
        env={"PERFLOOP_PROGRESS": "plain"},  # the progress lines, on stderr
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = last_json(proc)
    shown = last_json(perfloop(home, "show", s["session"], "--json"))
    verdicts = {d["playbook"]: d for d in shown["decisions"]}
    bad, good = verdicts["launch-changes-outputs"], verdicts["launch-smaller-pool"]
    assert bad["verdict"] == "rejected" and "outputs changed" in bad["reason"]
    assert "--seed" not in bad["launch_argv"] and bad["commit"] is None
    assert good["verdict"] == "accepted" and good["commit"] is None, good["reason"]
    assert good["tpot_ms_after"] < good["tpot_ms_before"]
    # Kept in the session: the final launch command lost --pool-slots and kept --seed 1 (the
    # rejected change was rolled back); nothing was committed to the target repo.
    assert s["accepted"] == ["launch-smaller-pool"] and s["commits"] == []
    assert "--pool-slots" not in s["launch_argv"] and s["launch_argv"][-2:] == ["--seed", "1"]
    assert git(repo, "rev-list", "--count", "main..HEAD").strip() == "0"
    notes = [t["note"] for t in shown["transitions"] if t["node"] in ("propose", "apply", "rollback")]
    assert any("launch options: drop --seed 1" in n for n in notes)
    assert any("launch options back to" in n for n in notes)
    # The baseline; the bad candidate alone (its outputs fail the correctness set before any
    # reference is launched); the good one and its reference beside it (the same tree with the
    # options kept so far); the confirming pair of launches, which `confirm_below` forces, and
    # which accepted too (the verdict would be inconclusive otherwise).
    confirmation = good["judgement"]["confirmation"]
    assert len(confirmation) >= 1 and confirmation[-1]["verdict"] == "accepted", good["reason"]
    assert "second pair of launches" in good["reason"] and "arms interleaved" in good["reason"]
    why = "on a fresh pair: its low end is under confirm_below 1000.0"  # said before it launches, and kept
    assert re.search(r"confirming \d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\] " + re.escape(why), proc.stderr), (
        proc.stderr[-3000:]
    )
    measured = [t["note"] for t in shown["transitions"] if t["node"] == "measure" and why in t["note"]]
    assert len(measured) == 1 and f"{why}: 1/" in measured[0], [t["note"] for t in shown["transitions"]]
    assert s["server_launches"] == 1 + 1 + 2 + 2, (s["server_launches"], good["reason"])
    assert_clean(repo, s)
    rep = perfloop(home, "replay", s["session"], "--json")
    assert rep.returncode == 0, rep.stderr[-2000:]
    replayed = last_json(rep)
    assert replayed["matches_recording"] is True and replayed["accepted"] == ["launch-smaller-pool"]
    assert replayed["launch_argv"] == s["launch_argv"]
