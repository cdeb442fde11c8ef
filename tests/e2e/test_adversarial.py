"""Candidates built to fool the decision, on the CPU demo target (each a playbook with its own patch).

- one-prompt-wrong: the real fix (fast) plus a bug past 120 positions of context, which only the
  longer of the two timing prompts reaches: rejected on the output gate before any timing verdict,
  the shorter prompt not named (the session's random prompt may reach it or not);
- slower: real extra work in decode (the full-pool cast done four times): a regression (or, where
  the host's speed changed between the arms, inconclusive: never kept);
- no-op: a comment-only patch: never accepted (with the default launch noise it ends inconclusive),
  with sequential arms in the session above and with interleaved arms in a session of its own.
The A/A false-accept rate over many sessions is measured by `benchmarks/decisions.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import (
    assert_clean,
    edited_diff,
    git,
    playbook_variant,
    run_playbooks,
    write_target,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]  # one session, up to four launches

BACKEND = "mla_server/attention/mla_backend.py"
CAST = "k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)"
FIX = [(CAST, "k_buffer = self.kv_pool.get_key_buffer(layer_id)"),
       ("k_buffer[kv_indices], causal=False)", "k_buffer[kv_indices].to(q.dtype), causal=False)")]  # fmt: skip
NO_OP = [("real = len(batch.kv_indices)\n", "real = len(batch.kv_indices)  # reviewed: nothing to change\n")]
SLOWER = [
    (
        CAST,
        CAST + "\n        for _ in range(3):\n            self.kv_pool.get_key_buffer(layer_id).to(q.dtype)",
    )
]
# Wrong only past 120 positions of context: the long timing prompt (some 190 tokens with the chat
# template) is there from its first step; the short one (some 30, plus at most 16 generated) never.
PROMPTS = (
    "Hi.",
    "Summarize: " + "the KV cache holds the keys and values of every token a request has seen; " * 2,
)
ONE_PROMPT = [
    (
        "k_buffer[kv_indices].to(q.dtype), causal=False)[0]\n",
        "k_buffer[kv_indices].to(q.dtype), causal=False)[0]\n"
        "            if len(kv_indices) > 120:\n"
        "                out[i] = 0\n",
    )
]


def run_books(
    tmp_path: Path,
    home: Path,
    repo: Path,
    books: Path,
    arms: str = "sequential",
    prompts: tuple[str, ...] = PROMPTS,
) -> tuple[dict, dict]:
    # One look per candidate: never kept is the claim, at any look (a no-op undecided for three looks
    # and never kept is tests/e2e/test_first_verdict.py's, the rule's rates over many sessions are
    # benchmarks/). Three looks measured the sequential baseline 9 requests per prompt and, under
    # load, took the slower candidate (200-340 ms a step) through all three when its first was
    # inconclusive (0.37x [0.12, 1.16] at load 8): 35-75 s more a session for the same claim.
    target = write_target(tmp_path / "t.toml", repo, arms=arms, prompts=prompts, looks=1)
    s, shown = run_playbooks(home, target, books)
    return s, {d["playbook"]: d for d in shown["decisions"]}


def test_wrong_for_one_prompt_slower_and_no_op_are_never_kept(tmp_path: Path, home: Path, repo: Path) -> None:
    books = tmp_path / "books"
    playbook_variant(
        books, "one-prompt-wrong", 0.99, edited_diff(repo, tmp_path, {BACKEND: FIX + ONE_PROMPT})
    )
    playbook_variant(books, "slower", 0.98, edited_diff(repo, tmp_path, {BACKEND: SLOWER}))
    playbook_variant(books, "no-op", 0.97, edited_diff(repo, tmp_path, {BACKEND: NO_OP}))
    s, by = run_books(tmp_path, home, repo, books)
    assert s["accepted"] == [] and sorted(s["rejected"]) == ["no-op", "one-prompt-wrong", "slower"], s
    wrong = by["one-prompt-wrong"]
    # Caught by the correctness set (which decodes further than the timing requests) or, if not
    # there, by the timing requests' outputs: either way the long prompt only.
    assert wrong["verdict"] == "rejected" and wrong["reason"].startswith("outputs changed "), wrong
    assert ("timing prompt 2" in wrong["reason"] and "timing prompt 1" not in wrong["reason"]) or wrong[
        "reason"
    ] == "outputs changed for 1/2 prompt(s)", wrong["reason"]
    assert wrong["judgement"] is None  # never timed past the gate
    slower = by["slower"]  # a regression on a steady host; a host whose load changes widens the CI
    assert slower["verdict"] in ("regression", "inconclusive"), slower["reason"]
    assert slower["judgement"]["looks"][-1]["speedup"] < 0.8, slower["reason"]
    noop = by["no-op"]
    assert noop["verdict"] in ("inconclusive", "rejected"), noop["reason"]
    assert len(noop["judgement"]["looks"]) >= 1 and "95% CI" in noop["reason"]
    assert noop["judgement"]["arms"] == "sequential"
    assert s["server_launches"] == 4  # the baseline and one launch per candidate: none is judged twice
    assert git(repo, "rev-list", "--count", "main..HEAD").strip() == "0"
    assert git(repo, "status", "--porcelain") == ""
    assert_clean(repo, s)


def test_no_op_is_never_accepted_with_interleaved_arms(tmp_path: Path, home: Path, repo: Path) -> None:
    """A comment-only patch in a fresh session with the reference launched beside it (with
    sequential arms, the test above; benchmarks/noop_sessions.py runs it 20 times)."""
    books = tmp_path / "books"
    playbook_variant(books, "no-op", 0.97, edited_diff(repo, tmp_path, {BACKEND: NO_OP}))
    s, by = run_books(tmp_path, home, repo, books, "interleaved")
    noop = by["no-op"]
    assert s["accepted"] == [] and noop["verdict"] != "accepted", noop["reason"]
    assert noop["judgement"]["arms"] == "interleaved" and "arms interleaved" in noop["reason"]
    # the baseline, the candidate and the reference beside it (no confirming pair: not accepted)
    assert s["server_launches"] == 3 and noop["judgement"]["confirmation"] == []
