"""Suite-wide guard: a test must not leave processes running in its temporary folders."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# Commands run by tests have no terminal: their progress would be timestamped lines on stderr
# (agent/cli/running.py), which tests that count stderr's lines do not expect; a test of those
# lines sets PERFLOOP_PROGRESS=plain for its command (tests/e2e/test_loop.py, the demo).
os.environ.setdefault("PERFLOOP_PROGRESS", "off")

from tests.guard import Scratch
from tests.procs import processes_in


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture(autouse=True)
def no_leaked_processes(request):
    """After each test that has a tmp_path: kill anything still running there, and say so."""
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if path is None:
        return
    leaked = processes_in(path)
    _kill(leaked)
    assert not leaked, f"test left {len(leaked)} process(es) running in its tmp_path (killed now)"


_MADE_BY_PYTEST: set[str] = set()
"""Folders pytest's own tmp_path_factory made under the base temp folder (tmp_path beside them)."""
_mktemp = pytest.TempPathFactory.mktemp


def _recorded_mktemp(self: pytest.TempPathFactory, basename: str, numbered: bool = True) -> Path:
    made = _mktemp(self, basename, numbered)
    _MADE_BY_PYTEST.update({made.name, f"{basename}current"})  # and pytest's link to the newest
    return made


pytest.TempPathFactory.mktemp = _recorded_mktemp  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def nothing_written_beside_tmp_path(request):
    """A test with a tmp_path writes only inside it: nothing new may appear beside it (a `..`
    escape from a $PERFLOOP_HOME or repo under tmp_path would land there), apart from the folders
    tmp_path_factory itself makes there (a session fixture's server folder, say)."""
    path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    before = set(os.listdir(path.parent)) if path is not None else set()
    yield
    if path is not None:
        new = set(os.listdir(path.parent)) - before - {path.name} - _MADE_BY_PYTEST
        assert not new, f"files written outside the test's tmp_path: {sorted(new)}"


@pytest.fixture(scope="session", autouse=True)
def no_leaks_at_exit(tmp_path_factory):
    """At the end of the run: kill whatever still runs under pytest's base temp folder."""
    yield
    _kill(processes_in(tmp_path_factory.getbasetemp()))


@pytest.fixture
def scratch(tmp_path):
    """A watched scratch root with a $PERFLOOP_HOME in it: the test fails if a file or folder
    appears there outside the home, the repositories it allows and its own inputs."""
    s = Scratch(tmp_path / "scratch")
    yield s
    stray = s.stray()
    assert not stray, f"files written outside $PERFLOOP_HOME and the target repo: {stray}"


from tests.pg import pg_server, pg_url  # noqa: E402, F401  (the PostgreSQL fixtures, for every test folder)

FIRST = ("tests/vllm/", "tests/ssh/", "tests/e2e/", "tests/web/", "tests/sglang/", "tests/llm/")
"""Where the longest units of work are, longest first; every other folder after them, in collection order."""


def _rank(item: pytest.Item) -> int:
    if (m := item.get_closest_marker("xdist_group")) is not None and m.args == ("vllm",):
        return 0
    path = item.nodeid.split("::")[0]
    return next((i + 1 for i, top in enumerate(FIRST) if path.startswith(top)), len(FIRST) + 1)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which names each test's group in its id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test` runs `-n 2 --dist loadgroup --no-loadscope-reorder`: every test file is one
    group, as `--dist loadfile` would make it (its module fixtures made once), except the files
    marked `pytest.mark.xdist_group("vllm")` (tests/vllm), which are one group together, so one
    worker runs the real vLLM servers one after another (~3 GB and both cores each) while the other
    worker runs the rest. Groups are handed out in this order, longest first (the vLLM group, ~13
    minutes, then the SSH, e2e and browser sessions), so the many short unit-test files fill the
    end and neither worker finishes minutes before the other (the longest-first rule of thumb)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    items.sort(key=_rank)  # stable: each folder keeps its collection order


def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """Under `--dist loadgroup`, stop before any test runs when the groups did not take:
    pytest-xdist names a test's group in its node id (`...::test@group`), which pytest 9.2's
    structured node ids silently drop (pytest-xdist issue #1386); every test would then be
    scheduled on its own (the vLLM servers two at a time, module fixtures made once per worker)."""
    if node.config.getvalue("dist") == "loadgroup" and (ungrouped := [i for i in ids if "@" not in i]):
        pytest.exit(
            f"--dist loadgroup did not group {ungrouped[0]} (pytest {pytest.__version__}, pytest-xdist "
            "issue #1386): install the pytest that pyproject.toml pins (make venv)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
