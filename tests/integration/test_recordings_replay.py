"""Every session recording the repository ships (`benchmarks/**/*.json.gz`, tests/data/sessions)
replays with today's perfloop and decides as it did: the same calls in the same order, and the same
summary but for the fields that word a decision (`WORDING`: a noise phrase reworded since, a
mechanism's prediction refined). A recording that cannot replay here is listed in `CANNOT` with
why, and must fail with exactly that divergence (so a new break is caught, and a mended one is
moved out of the list); one whose playbooks lived in a folder gone since has them made again
(`PLAYBOOK_DIRS`), as its user would."""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.cli.commands.sessions import WORDING, differing, not_compared
from agent.sessions.archive import import_session
from agent.sessions.runner import Sessions
from tools.door.replay import ReplayDivergence

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = sorted(
    p.relative_to(ROOT).as_posix()
    for p in [*ROOT.glob("benchmarks/**/*.json.gz"), *ROOT.glob("tests/data/sessions/*.json.gz")]
    if "session" in p.name
)
CANNOT: dict[str, str] = {
    # benchmarks/h200-2026-12-04-blocks/search-serving (05:47 on 12-04) ran the first paired-blocks
    # plan; its session id tells (agent/decision/arms/blocks.py `first_plan`), and it replays as it ran
}
PLAYBOOK_DIRS = {
    # noop_sessions.py's comment-only playbook lived in a temporary folder, read from disk (a
    # session's playbooks are not in its recording): made again where the session named it, by
    # the benchmark's own function, these replay as recorded; without it diagnose finds nothing
    # and the replay diverges at call #39 (`NO_PLAYBOOK`)
    "benchmarks/h200-2026-12-04-decide/noop-defaults-session.json.gz": "/tmp/noop-it7vb1zh/books",
    "benchmarks/h200-2026-12-04-decide/noop-defaults-short-session.json.gz": "/tmp/noop-z09pjjaj/books",
}
NO_PLAYBOOK = "call #39 (server.stop from node abort) differs: the recording has repo.remove_instrumentation from node cleanup"


@contextmanager
def playbooks_made_again(recording: str) -> Iterator[None]:
    """The no-op playbook of benchmarks/noop_sessions.py at the folder the recording names, for
    the replay only (made beside it and renamed into place; a folder already there is compared)."""
    if recording not in PLAYBOOK_DIRS:
        yield
        return
    spec = importlib.util.spec_from_file_location("noop_sessions", ROOT / "benchmarks/noop_sessions.py")
    assert spec is not None and spec.loader is not None  # benchmarks/ is not a package
    noop_sessions = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noop_sessions)
    books = Path(PLAYBOOK_DIRS[recording])
    made = Path(tempfile.mkdtemp(prefix="replay-books-"))
    noop_sessions.no_op_playbook(made / "books")
    ours = False
    try:
        books.parent.mkdir(exist_ok=False)
        (made / "books").rename(books)
        ours = True
    except FileExistsError:  # another run's copy: it must be the same playbook
        for f in (made / "books").rglob("*"):
            if f.is_file():
                assert (books / f.relative_to(made / "books")).read_text() == f.read_text(), f
    try:
        yield
    finally:
        shutil.rmtree(made, ignore_errors=True)
        if ours:
            shutil.rmtree(books.parent, ignore_errors=True)


def test_the_list_is_the_repositorys() -> None:
    assert len(RECORDINGS) >= 16 and "tests/data/sessions/demo-session.json.gz" in RECORDINGS
    assert set(CANNOT) | set(PLAYBOOK_DIRS) <= set(RECORDINGS), set(CANNOT) - set(RECORDINGS)


@pytest.mark.parametrize("recording", RECORDINGS)
def test_every_recording_replays_and_decides_as_recorded(
    recording: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    sessions = Sessions()
    sid = import_session(sessions.store, ROOT / recording)
    recorded = sessions.info(sid).summary
    assert recorded is not None
    if recording in CANNOT:
        with pytest.raises(ReplayDivergence) as diverged:
            sessions.replay(sid)
        assert str(diverged.value) == CANNOT[recording]
        return
    if recording in PLAYBOOK_DIRS and not Path(PLAYBOOK_DIRS[recording]).exists():
        with pytest.raises(ReplayDivergence) as diverged:  # the folder gone: diagnose finds nothing
            sessions.replay(sid)
        assert str(diverged.value) == NO_PLAYBOOK
    with playbooks_made_again(recording):
        _, replayed = sessions.replay(sid)
    skip = not_compared(recorded, replayed)  # fields the recording's perfloop did not fill yet
    differ = differing(recorded, replayed, skip)
    assert not differ - WORDING, {k: (getattr(recorded, k), getattr(replayed, k)) for k in differ - WORDING}
    for kept in {"verdict", "speedup_ci", "speedup_judged", "accepted", "rejected", "commits"} - skip:
        assert getattr(replayed, kept) == getattr(recorded, kept), kept


def test_the_cli_says_which_lines_are_worded_differently_and_exits_0(tmp_path: Path) -> None:
    """A recording of 11-30 (the launch noise's phrase reworded since, the cast's predicted
    shrink refined): `replay` exits 0, names those lines, and `--json` lists them."""
    from tests.e2e.conftest import last_json, perfloop

    home = tmp_path / "home"
    proc = perfloop(
        home, "import", str(ROOT / "benchmarks/h200-2026-11-30-ci-rule/c-eager-ci-session.json.gz")
    )
    assert proc.returncode == 0, proc.stderr
    told = perfloop(home, "replay", "last", env={"COLUMNS": "60"})  # one line even on a narrow terminal
    assert told.returncode == 0, told.stderr[-2000:]
    assert told.stderr.endswith(
        ": same decisions as recorded (worded differently now: decision, mechanisms)\n"
    )
    out = last_json(perfloop(home, "replay", "last", "--json"))
    assert out["matches_recording"] is True and out["worded_differently"] == ["decision", "mechanisms"]
