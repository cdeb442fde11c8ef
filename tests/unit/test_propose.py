"""agent/steps/propose.py: the files a proposed diff touches."""

from __future__ import annotations

from agent.steps.propose import files_of


def test_files_of_a_diff() -> None:
    diff = "diff --git a/x/y.py b/x/y.py\n--- a/x/y.py\n+++ b/x/y.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert files_of(diff) == ["x/y.py"]
