"""Every session recording the repository ships (`benchmarks/**/*.json.gz`, tests/data/sessions)
replays from itself alone, in a fresh `$PERFLOOP_HOME`, with today's perfloop and decides as it did:
the same calls in the same order, and the same summary but for the fields that word a decision
(`WORDING`: a noise phrase reworded since, a mechanism's prediction refined). A recording that
cannot replay here is listed in `CANNOT` with why, and must fail with exactly that divergence (so a
new break is caught, and a mended one is moved out of the list).

No file outside the recording is read: a session's extra playbooks travel in its options
(`LoopOptions.playbook_files`; the two no-op sessions of benchmarks/h200-2026-12-04-decide, whose
playbook lived in a temporary folder, had them added from benchmarks/noop_sessions.py's
`no_op_playbook`, the function that wrote it), and every folder a recording names is checked to be
absent here."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent.cli.commands.sessions import READ_BACK, WORDING, differing, import_recording, not_compared
from agent.cli.render import session_json
from agent.report.headline import headline, judged, summary_json
from agent.sessions.archive import import_session as import_into
from agent.sessions.runner import Sessions
from state.sessions.loop import LoopState
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


_OPENED: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if (
        _OPENED is not None
        and event == "open"
        and isinstance(args[0], str | Path)
        and Path(args[0]).is_absolute()
    ):
        _OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # one hook for the test process; it records only inside `files_opened`


@contextmanager
def files_opened() -> Iterator[list[str]]:
    """The paths opened in the block (Python's `open` audit event: files, sqlite's database too)."""
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None


def _perfloops(path: Path, home: Path) -> bool:
    """Whether a file is perfloop's own or the fresh home's: its code, built-in catalog and installed
    metadata, the interpreter's, the test's $PERFLOOP_HOME; never examples/, benchmarks/, a session's."""
    p = path.resolve()
    if p.is_relative_to(home.resolve()) or p.is_relative_to(Path(sys.prefix).resolve()):
        return True
    if p.is_relative_to(Path(sys.base_prefix).resolve()) or str(p).startswith(("/proc/", "/dev/", "/sys/")):
        return True
    own = (
        "agent",
        "tools",
        "state",
        "playbooks",
        "perfloop.egg-info",
    )  # the egg-info: its engines' entry points
    return any(p.is_relative_to(ROOT / d) for d in own) or ".venv" in p.parts or "site-packages" in p.parts


def test_the_audit_sees_a_file_read_outside(tmp_path: Path) -> None:
    with files_opened() as opened:
        (ROOT / "examples" / "targets" / "mla_server.toml").read_text()
    assert [f for f in opened if not _perfloops(Path(f), tmp_path)] == [
        str(ROOT / "examples" / "targets" / "mla_server.toml")
    ]


def test_the_list_is_the_repositorys() -> None:
    assert len(RECORDINGS) >= 16 and "tests/data/sessions/demo-session.json.gz" in RECORDINGS
    assert set(CANNOT) <= set(RECORDINGS), set(CANNOT) - set(RECORDINGS)


def import_session(sessions: Sessions, path: Path) -> str:
    return import_into(sessions.store, path)  # as recorded, nothing filled


@pytest.mark.parametrize("recording", RECORDINGS)
def test_every_recording_replays_and_decides_as_recorded(
    recording: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFLOOP_HOME", str(tmp_path / "home"))
    sessions = Sessions()
    sid = (import_session if recording in CANNOT else import_recording)(sessions, ROOT / recording)
    recorded = sessions.info(sid).summary
    assert recorded is not None
    if recording in CANNOT:
        with pytest.raises(ReplayDivergence) as diverged:
            sessions.replay(sid)
        assert str(diverged.value) == CANNOT[recording]
        return
    options = LoopState.model_validate(sessions.store.inputs(sid, "initial")[0]).options
    for books in options.playbook_dirs:
        assert not Path(books).exists(), f"{books} exists here: the test proves nothing"
    with files_opened() as opened:
        _, replayed = sessions.replay(sid)
    outside = {f for f in opened if not _perfloops(Path(f), tmp_path)}
    assert not outside, f"the replay read files outside the recording: {sorted(outside)[:5]}"
    skip = not_compared(recorded, replayed)  # fields the recording's perfloop did not fill yet
    differ = differing(recorded, replayed, skip)
    assert not differ - WORDING, {k: (getattr(recorded, k), getattr(replayed, k)) for k in differ - WORDING}
    for kept in {"verdict", "speedup_ci", "speedup_judged", "accepted", "rejected", "commits"} - skip:
        assert getattr(replayed, kept) == getattr(recorded, kept), kept
    # one speedup: `sessions` (its column), `sessions --json` and `show --json` (the stored
    # summary), `replay --json` (the replayed one); an import fills what an old recording lacks
    assert judged(recorded) == judged(replayed) and headline(recorded) == headline(replayed)
    listed = session_json(sessions.info(sid))["summary"]
    assert listed["speedup"] == summary_json(replayed)["speedup"], (
        listed["speedup"],
        replayed.speedup_judged,
    )
    assert (listed["speedup"] is None) == (not recorded.accepted or recorded.speedup_ci is None)


def test_the_cli_says_which_lines_are_worded_differently_and_exits_0(tmp_path: Path) -> None:
    """A recording of 11-30 (the launch noise's phrase reworded since, the cast's predicted
    shrink refined): `replay` exits 0, names those lines, and `--json` lists them."""
    from tests.e2e.conftest import last_json, perfloop

    home = tmp_path / "home"
    proc = perfloop(
        home, "import", str(ROOT / "benchmarks/h200-2026-11-30-ci-rule/c-eager-ci-session.json.gz")
    )
    assert proc.returncode == 0, proc.stderr
    said = ": same decisions as recorded (worded differently now: decision, mechanisms)"
    for again in (["--again"], []):  # the graph run; then its replay read back, saying so
        told = perfloop(home, "replay", "last", *again, env={"COLUMNS": "60"})  # one line, narrow too
        assert told.returncode == 0, told.stderr[-2000:]
        assert told.stderr.endswith(f"{said}\n" if again else f"{said} {READ_BACK}\n"), told.stderr
    out = last_json(perfloop(home, "replay", "last", "--json"))
    assert out["matches_recording"] is True and out["worded_differently"] == ["decision", "mechanisms"]


def _speedups(doc: object) -> list[object]:
    """Every value under a `speedup` key of a JSON document, at any depth (whatever its shape)."""
    if isinstance(doc, dict):
        return [v for k, x in doc.items() for v in ([x] if k == "speedup" else _speedups(x))]
    return [v for x in doc for v in _speedups(x)] if isinstance(doc, list) else []


def test_the_readmes_recording_says_one_speedup_in_every_command(tmp_path: Path) -> None:
    """The recording the README has a user import (made before the summary kept the judged figure):
    `sessions` prints it, and `sessions --json`, `show --json`, `replay --json` give the same number."""
    from tests.e2e.conftest import last_json, perfloop

    home = tmp_path / "home"
    recording = ROOT / "benchmarks/h200-2026-11-30-interleaved/interleaved-session.json.gz"
    assert perfloop(home, "import", str(recording)).returncode == 0
    assert "5.23x [4.35, 6.12]" in perfloop(home, "sessions", env={"COLUMNS": "200"}).stdout
    said = {
        cmd: _speedups(last_json(perfloop(home, *cmd.split(), "--json")))
        for cmd in ("sessions", "show last", "replay last")
    }
    assert all(v and {round(float(x), 9) for x in v} == {5.230542935} for v in said.values()), said  # type: ignore[arg-type]
