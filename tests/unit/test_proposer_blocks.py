"""agent/proposer/edits/blocks.py: the model's SEARCH/REPLACE edit blocks parsed, applied, turned into a diff."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.proposer.edits.blocks import EditError, apply_blocks, parse, unified_diff


def test_parse_takes_blocks_in_fences_and_keeps_the_rationale() -> None:
    answer = (
        "The cast is slow.\n\n```python\na/b.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```\n"
        "**c.py**\n<<<<<<< SEARCH\n=======\nnew\n>>>>>>> REPLACE\nDone.\n"
    )
    blocks, rationale = parse(answer)
    assert [(b.path, b.search, b.replace) for b in blocks] == [
        ("a/b.py", "x = 1\n", "x = 2\n"),
        ("c.py", "", "new\n"),
    ]
    assert rationale == "The cast is slow.\n\nDone."


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("no blocks here", "no edit blocks found"),
        ("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n", "put the file's repo-relative path"),
        ("f.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n", "needs a `=======` line"),
        ("f.py\n<<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n", "not a well-formed marker"),
    ],
)
def test_parse_names_what_is_malformed(answer: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        parse(answer)


def test_apply_needs_exactly_one_match_and_shows_the_closest_lines() -> None:
    texts: dict[str, str | None] = {"f.py": "a = 1\nb = 2\nb = 2\nc = 3\n"}
    blocks, _ = parse("f.py\n<<<<<<< SEARCH\nb = 2\n=======\nb = 5\n>>>>>>> REPLACE\n")
    with pytest.raises(EditError, match="matches 2 places"):
        apply_blocks(blocks, texts)
    blocks, _ = parse("f.py\n<<<<<<< SEARCH\nc  = 3\n=======\nc = 4\n>>>>>>> REPLACE\n")
    with pytest.raises(EditError, match=r"does not match the file exactly(.|\n)*4\tc = 3"):
        apply_blocks(blocks, texts)
    blocks, _ = parse("g.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n")
    with pytest.raises(EditError, match="g.py does not exist"):
        apply_blocks(blocks, texts)


def test_unified_diff_applies_with_git_including_new_files_and_missing_final_newline(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\ny = 2")  # no final newline
    old = {"a.py": "x = 1\ny = 2", "n.py": None}
    diff = unified_diff(old, {"a.py": "x = 1\ny = 3", "n.py": "print('hi')\n"})
    subprocess.run(["git", "apply", "-"], cwd=tmp_path, input=diff, text=True, check=True)
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 3" and (tmp_path / "n.py").exists()
