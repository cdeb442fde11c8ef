"""`--json` is one JSON document on stdout and nothing else, piped through `python -m json.tool`, for
the commands that read the store or a trace (`eval proposer` in tests/llm/test_eval.py; the loop's commands, `demo`, `run`, `approve`, `fork`,
... are held to it by tests/e2e/conftest.py's `last_json`, which parses all of stdout); a closed pipe
ends a command quietly with status 141, as a Unix tool killed by SIGPIPE does."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import PERFLOOP, perfloop

DATA = Path(__file__).resolve().parents[1] / "data"
TRACES = DATA / "traces"
FULL, FIXED = str(TRACES / "full_pool_cast_cuda.json.gz"), str(TRACES / "gather_then_cast_cuda.json.gz")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    proc = perfloop(home, "import", str(DATA / "sessions" / "demo-session.json.gz"))
    assert proc.returncode == 0, proc.stderr
    return home


def piped(home: Path, args: list[str], into: str) -> subprocess.CompletedProcess:
    line = f"set -o pipefail; {shlex.quote(str(PERFLOOP))} {shlex.join(args)} | {into}"
    env = {**os.environ, "PERFLOOP_HOME": str(home), "COLUMNS": "80"}
    return subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=300)


COMMANDS = [
    ["sessions"],
    ["show", "20261130"],
    ["replay", "last"],
    ["analyze", FULL],
    ["diagnose", FULL],
    ["diff", FULL, FIXED],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]).split("/")[0])
def test_json_is_one_document_on_stdout(home: Path, args: list[str]) -> None:
    proc = piped(home, [*args, "--json"], f"{shlex.quote(sys.executable)} -m json.tool")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip()[0] in "[{"


def test_a_closed_pipe_ends_quietly(home: Path) -> None:
    """The reader is gone before perfloop writes: no "internal error", status 141 (128 + SIGPIPE)."""
    for args in (["show", "20261130", "--json"], ["show", "20261130"], ["analyze", FULL]):
        env = {**os.environ, "PERFLOOP_HOME": str(home)}
        p = subprocess.Popen([str(PERFLOOP), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.close()  # `| head` that has read its line
        _, err = p.communicate(timeout=120)
        assert p.returncode == 141 and b"error" not in err, (args, p.returncode, err[-500:])
    proc = piped(home, ["show", "20261130"], "head -1")  # the pipe may or may not close first
    assert proc.returncode in (0, 141) and "error" not in proc.stderr, proc.stderr
