"""agent/cli/render.py: how sessions and approvals look in a terminal."""

from __future__ import annotations

import io

from rich.console import Console

from agent.cli import render


def test_approval_of_a_model_patch_says_so() -> None:
    req = {
        "session": "s",
        "title": "Gather then cast",
        "explanation": "Cast only the rows.",
        "expected_gain_ms": None,
        "expected_gain_share": 0.0,
        "files": ["a.py"],
        "diff": "--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n",
        "evidence": [],
        "proposer": "llm",
        "model": "coder-7b",
        "rationale": "Cast only the rows.",
        "llm_tokens": 2710,
        "repairs": 1,
    }
    out = io.StringIO()
    render.approval(Console(file=out, width=200), req)
    text = out.getvalue()
    assert "written by a model, not a playbook: coder-7b, 2710 tokens, 1 repair round(s)" in text
    assert "model's rationale:" in text


def test_the_branch_row_says_where_the_checkout_went_back() -> None:
    """An ended `run` gives the checkout back: the row names the branch holding the commits and the
    one the checkout is on; no commit kept, no branch; not given back (paused, recorded before): the branch."""
    kept = render.branch_words("perfloop/s1", "main")
    assert kept == "perfloop/s1 holds the accepted commits; your checkout is back on main"
    assert render.branch_words(None, "main") == "no commit kept; your checkout is back on main"
    assert render.branch_words("perfloop/s1", None) == "perfloop/s1"
