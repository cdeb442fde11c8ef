"""A patch wrong only far into the context is caught by the correctness set's long prompts.

The demo server runs with a 256-token context (cheap prefills); the ordinary prompts of the set stay
under 120 tokens, the long prompts are stratified up to the limit the server states. The candidate
is the real fix (gather-then-cast) plus a bug in decode attention that drops every key past
position 160 (between half the limit and the limit): only a long prompt reaches it, and the
candidate must be rejected on the output gate, the failing length named in the reason. The same fix
without the bug, proposed next in the same session, passes the gate (outputs identical on every
long prompt) and is timed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    assert_clean,
    edited_diff,
    playbook_variant,
    run_playbooks,
    write_target,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # one session, three launches

BACKEND = "mla_server/attention/mla_backend.py"
CAST = "k_buffer = self.kv_pool.get_key_buffer(layer_id).to(q.dtype)"
FIX = [(CAST, "k_buffer = self.kv_pool.get_key_buffer(layer_id)"),
       ("k_buffer[kv_indices], causal=False)", "k_buffer[kv_indices].to(q.dtype), causal=False)")]  # fmt: skip
PAST_160 = [  # decode attention lost once a request's context passes 160 positions
    (
        "k_buffer[kv_indices].to(q.dtype), causal=False)[0]\n",
        "k_buffer[kv_indices].to(q.dtype), causal=False)[0]\n"
        "            if len(kv_indices) > 160:\n"
        "                out[i] = 0\n",
    )
]


def test_a_patch_wrong_past_position_160_of_256_is_rejected_naming_the_length(
    tmp_path: Path, home: Path, repo: Path
) -> None:
    books = tmp_path / "books"
    diff = edited_diff(repo, tmp_path, {BACKEND: FIX + PAST_160})
    playbook_variant(books, "cast-fix-past-160", 0.99, diff)
    playbook_variant(books, "cast-fix", 0.98, edited_diff(repo, tmp_path, {BACKEND: FIX}))
    target = write_target(tmp_path / "t.toml", repo, looks=1, long_prompts=3).read_text()
    target = target.replace('"--layers", "1"]', '"--layers", "1", "--context-len", "256"]')
    target = target.replace("max_prompt_chars = 300", "max_prompt_chars = 80")
    assert "--context-len" in target and "long_prompts = 3" in target and "max_prompt_chars = 80" in target
    (tmp_path / "t.toml").write_text(target)
    s, shown = run_playbooks(home, tmp_path / "t.toml", books)
    baseline = next(t["note"] for t in shown["transitions"] if t["node"] == "baseline")
    d, fix = shown["decisions"]
    assert d["playbook"] == "cast-fix-past-160" and "cast-fix-past-160" in s["rejected"], (
        baseline,
        d["reason"],
    )
    # the fix alone passes the gate, long prompts included, and is judged on its timing
    assert fix["playbook"] == "cast-fix" and fix["judgement"] is not None, fix["reason"]
    assert "outputs identical alone; 0/" in fix["reason"], fix["reason"]  # the schedule gate's line
    assert fix["reason"].endswith("within the baseline's schedule noise"), fix["reason"]
    # the limit the server states, and how far the set reached
    reach = s["correctness_set"]
    m = re.fullmatch(
        r"3 long prompts of (\d+)/(\d+)/240 \+ 16 tokens to the context limit 256 "
        r"\(/get_server_info context_len\), fitted in (\d+) requests, [\d.]+ s",
        reach,
    )
    assert m, reach
    short, middle = int(m[1]), int(m[2])
    assert short <= 80 < middle <= 160, reach  # one length in each third of the range

    assert d["verdict"] == "rejected" and d["judgement"] is None, d  # never timed past the gate
    reason = d["reason"]
    assert reason.startswith("outputs changed on the correctness set: "), reason
    # the long prompt at the limit differs alone, where the schedule is the baseline's: the math
    # (the batch is not compared once the texts alone differ); nothing short of 160 does
    assert "long prompt 3: 240 + 16 tokens of 256" in reason, reason
    assert reason.endswith("where the schedule is the baseline's: the math changed"), reason
    assert "timing prompt" not in reason and "random prompt" not in reason, reason
    assert f"long prompt 1: {short} + 16" not in reason, reason
    assert "they cost 3 requests alone and 3 in the batch" in baseline, baseline
    assert s["server_launches"] == 3
    assert_clean(repo, s)
