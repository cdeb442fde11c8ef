"""Edits like the best editors: whitespace-tolerant, unique matching; copied line numbers; paths
normalized; a malformed divider named as such (pure)."""

from __future__ import annotations

import pytest

from agent.proposer.edits.blocks import EditError, apply_blocks, normal_path, parse
from agent.proposer.edits.matching import replace_once

FILE = "def f(x):\n    if x:\n        return x.to(q)\n    return None\n"


def test_exact_first() -> None:
    assert replace_once(FILE, "return None\n", "return 0\n") == (FILE.replace("None", "0"), 1, "exact")


def test_trailing_whitespace_is_ignored() -> None:
    new, n, how = replace_once(
        FILE, "    if x:   \n        return x.to(q)\n", "    if x:\n        return x\n"
    )
    assert (n, how) == (1, "trailing whitespace ignored") and new == FILE.replace("x.to(q)", "x")


def test_indentation_drift_shifts_the_replacement_alike() -> None:
    new, n, how = replace_once(FILE, "if x:\n    return x.to(q)\n", "if x:\n    y = x.to(q)\n    return y\n")
    assert (n, how) == (1, "indentation shifted")
    assert new == "def f(x):\n    if x:\n        y = x.to(q)\n        return y\n    return None\n"


def test_line_numbers_copied_from_read_file_are_dropped() -> None:
    new, n, how = replace_once(FILE, "4\t    return None\n", "    return 0\n")
    assert (n, how) == (1, "without line numbers") and new is not None and new.endswith("return 0\n")


def test_an_ambiguous_tolerant_match_is_reported_never_guessed() -> None:
    text = "  b = 2\n  c = 3\nd = 4\n    b = 2\n    c = 3\n"
    assert replace_once(text, "b = 2\nc = 3\n", "b = 5\n")[:2] == (None, 2)
    answer = "m.py\n<<<<<<< SEARCH\nb = 2\nc = 3\n=======\nb = 5\n>>>>>>> REPLACE\n"
    with pytest.raises(EditError, match=r"matches 2 places in m.py \(indentation shifted\)"):
        apply_blocks(parse(answer)[0], {"m.py": text})


def test_paths_are_normalized() -> None:
    assert normal_path("./mla_server\\attention//x.py") == "mla_server/attention/x.py"
    (block,), _ = parse("./a/b.py\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n")
    assert block.path == "a/b.py"


def test_a_malformed_divider_is_named() -> None:
    with pytest.raises(EditError, match=r"line 4 `======` is not a well-formed divider"):
        parse("a.py\n<<<<<<< SEARCH\nx\n======\ny\n>>>>>>> REPLACE\n")


def test_the_static_check_refuses_a_new_undefined_name_not_an_old_one() -> None:
    from agent.proposer.edits.checks import Candidate, check_static

    old = "import os\n\ndef f(x):\n    return missing(x)\n"
    c = Candidate(
        answer="", old={"m.py": old}, new={"m.py": old.replace("return", "y = torch.zeros(1)\n    return")}
    )
    assert check_static(c) == (
        "after your edits m.py has problems a static check finds:\nline 4: undefined name 'torch': y = torch.zeros(1)"
    )
    assert check_static(Candidate(answer="", old={"m.py": old}, new={"m.py": old + "\n"})) is None
