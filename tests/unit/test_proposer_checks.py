"""agent/proposer/edits/checks.py: the path allowlist and the checks a model's answer passes in order."""

from __future__ import annotations

from unittest.mock import ANY

import pytest

from agent.proposer.edits.checks import Failure, path_problem, validate
from state.proposers.proposer import DEFAULT_PROTECTED


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../x.py", "outside the repository"),
        ("/etc/passwd", "outside the repository"),
        (".git/hooks/pre-commit", "inside .git"),
        ("sub/.GIT/config", "inside .git"),
        ("tests/test_speed.py", "protected"),
        ("pkg/tests/helpers.py", "protected"),
        ("pkg/test_kernels.py", "protected"),
        ("benchmarks/run.py", "protected"),
        ("mla_server/attention/mla_backend.py", None),
    ],
)
def test_path_allowlist(path: str, problem: str | None) -> None:
    found = path_problem(path, DEFAULT_PROTECTED)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_validate_stops_at_the_first_failing_check() -> None:
    texts: dict[str, str | None] = {"m.py": "def f():\n    return 1\n"}
    ok = "m.py\n<<<<<<< SEARCH\n    return 1\n=======\n    return 2\n>>>>>>> REPLACE\n"
    git = lambda c: None
    result = validate(ok, lambda paths: {p: texts.get(p) for p in paths}, DEFAULT_PROTECTED, git)
    assert not isinstance(result, Failure) and "+    return 2" in result.diff
    bad = ok.replace("return 2", "return (")
    assert validate(bad, lambda p: texts, DEFAULT_PROTECTED, git) == Failure("python", ANY)
    gate = [("gate", lambda c: "refused by the shared gate")]
    assert validate(ok, lambda p: texts, DEFAULT_PROTECTED, git, gate) == Failure(
        "gate", "refused by the shared gate"
    )
    assert validate(ok.replace("m.py", "../m.py"), lambda p: texts, DEFAULT_PROTECTED, git) == Failure(
        "path", ANY
    )
