"""Interrupted sessions leave nothing running and resume: SIGTERM at a launch, SIGINT in `measure`
and SIGHUP at the reference's launch beside the candidate (interleaved arms); SIGKILL of perfloop
and then of every server it left, while it was down (at `profile` and at `decide`). One session
takes all of them in turn (CI time). Real CLI processes (forked from one pre-imported interpreter,
tests/forkcli.py), real demo servers, real git repos, SQLite store."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import git, kept_unless_drifted, last_json, make_repo, write_target
from tests.forkcli import ForkedCli
from tests.procs import processes_in
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
CAST_FIX = "kv-cache-full-pool-cast"


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> Iterator[ForkedCli]:
    """One pre-imported interpreter for the module's `perfloop` commands."""
    with ForkedCli(tmp_path_factory.mktemp("cli"), dict(os.environ)) as z:
        yield z


def run(cli: ForkedCli, home: Path, faults: Path, *args: str) -> subprocess.CompletedProcess:
    return cli(*args, env={**os.environ, "PERFLOOP_HOME": str(home), "PERFLOOP_FAULTS_FILE": str(faults)})


def nothing_left(repo: Path, home: Path, session: str) -> None:
    """No server process (so no port held), no reference worktree, no lease on the session."""
    assert processes_in(repo) == [] and processes_in(home) == [], "a server was left running"
    assert len(git(repo, "worktree", "list").splitlines()) == 1, "a reference worktree was left"
    assert not (home / "sessions" / session / "reference").exists()
    assert SessionStore.open(home).held() == {}, "the session's lease was left"


def finished_like_uninterrupted(cli: ForkedCli, home: Path, faults: Path, session: str) -> str:
    """Resume to the end: the cast fix is kept with identical outputs, the recording replays;
    returns the resume's stderr."""
    faults.write_text("")
    done = run(cli, home, faults, "resume", session, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    s = last_json(done)
    assert s["status"] == "done"
    if kept_unless_drifted(s["accepted"] == [CAST_FIX], s["decision"]):
        assert (s["rejected"], s["outputs_identical"]) == ([], True)
    else:
        assert s["rejected"] == [CAST_FIX]
    replayed = run(cli, home, faults, "replay", session, "--json")
    assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True, replayed.stderr[
        -2000:
    ]
    return done.stderr


def store_calls(home: Path, session: str) -> list:
    """The session's current calls (those a resume superseded left out)."""
    store = SessionStore.open(home)
    try:
        return store.tool_calls(session)
    finally:
        store.close()


def kill_servers(*places: Path) -> list[int]:
    """SIGKILL every process running in `places` (a reboot or the OOM killer); returns them."""
    pids = [pid for place in places for pid in processes_in(place)]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def leftovers_named(cli: ForkedCli, tmp_path: Path, home: Path, faults: Path) -> list[str]:
    """The lines a short session started now in the same home says of servers still running (its
    own server cannot start)."""
    broken = write_target(tmp_path / "b.toml", make_repo(tmp_path / "other"))
    broken.write_text(
        broken.read_text().replace('argv = ["bash", "launch.sh"', 'argv = ["false", "launch.sh"')
    )
    faults.write_text("")
    started = run(cli, home, faults, "run", "--approve", "auto", str(broken), "--json")
    assert started.returncode != 0
    return [ln for ln in started.stderr.splitlines() if "still run" in ln or "running now" in ln]


@pytest.mark.timeout(1500)
def test_interrupts_leave_nothing_running_and_resume_relaunches_dead_servers(
    cli: ForkedCli, tmp_path: Path
) -> None:
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    target = write_target(tmp_path / "t.toml", repo, looks=1, arms="interleaved")
    faults.write_text("server:spawned TERM\n")  # the first launch, waiting for health
    first = run(cli, home, faults, "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1")
    assert first.returncode == 143, first.stderr[-2000:]
    session = last_json(run(cli, home, faults, "sessions", "--json"))[0]["id"]
    assert (
        f"interrupted by SIGTERM; servers stopped; continue with `perfloop resume {session}`" in first.stderr
    )
    nothing_left(repo, home, session)
    info = SessionStore.open(home).get_session(session)
    assert info is not None and info.status == "interrupted"

    faults.write_text("node:profile\n")  # SIGKILL: the baseline server is left running
    killed = run(cli, home, faults, "resume", session, "--json")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    [left] = processes_in(repo)
    # Issue 63 item 9: its lease has not expired yet, but its holder is gone: a leftover, not a
    # session running now, named with the command that stops it (the server leads its own group)
    assert leftovers_named(cli, tmp_path, home, faults) == [
        f"warning: servers started by earlier sessions still run: pid {left} (session {session}); "
        f"stop them with `kill -- -{left}`"
    ]
    assert kill_servers(repo) == [left]  # while perfloop is down

    faults.write_text("node:measure INT\n")  # the candidate server runs
    second = run(cli, home, faults, "resume", session, "--json")
    assert second.returncode == 130, second.stderr[-2000:]
    # launch #1 was cut by SIGTERM: the baseline is #2, and its launch again takes #3 (issue 63 item 8)
    assert f"server #2 (pid {left}) is not running; going back to launch" in second.stderr
    nothing_left(repo, home, session)

    # measure needs the candidate server, which the interrupt stopped: resume launches it again
    # (first spawn), then the reference beside it (second spawn, from its worktree) gets SIGHUP
    faults.write_text("server:spawned pass\nserver:spawned HUP\n")
    third = run(cli, home, faults, "resume", session, "--json")
    assert third.returncode == 129, third.stderr[-2000:]
    assert "is not running; going back to relaunch to launch it again" in third.stderr
    assert faults.read_text() == ""
    *before, hup = [c for c in store_calls(home, session) if c.name == "server.launch"]
    number = hup.input["launch_number"]  # the reference's, past every launch made before it
    assert number > max(c.input["launch_number"] for c in before), [c.input for c in before]
    assert hup.input["log_path"] == str(
        home / "sessions" / session / "logs" / f"server-{number}-reference.log"
    )
    assert Path(hup.input["log_path"]).exists()
    nothing_left(repo, home, session)

    faults.write_text("node:decide\n")  # SIGKILL after the candidate was measured
    assert run(cli, home, faults, "resume", session, "--json").returncode == -signal.SIGKILL
    assert kill_servers(repo, home)  # the candidate server, while perfloop is down

    stderr = finished_like_uninterrupted(cli, home, faults, session)
    assert "going back to relaunch" in stderr
    nothing_left(repo, home, session)
    # issue 57: the summary counted only the finished attempts' launches, and `show` said nothing
    # of the interruptions; every launch recorded counts, and each cut attempt is shown
    store = SessionStore.open(home)
    every = store.tool_calls(session, include_superseded=True)
    info = store.get_session(session)
    store.close()
    launched = sum(1 for c in every if c.name == "server.launch" and c.reused_from is None)
    # issue 63 item 8: each resume numbered its launches past the cut attempts' (their logs and
    # marks too): no number twice
    numbers = [c.input["launch_number"] for c in every if c.name == "server.launch"]
    assert len(numbers) == len(set(numbers)), numbers
    assert info is not None and info.summary is not None and info.summary.server_launches == launched
    shown = last_json(run(cli, home, faults, "show", session, "--json"))
    cuts = shown["interruptions"]
    assert all(c["resumed"] for c in cuts), cuts
    signalled = [(c["step"], c["call"]) for c in cuts if c["signal"]]  # SIGTERM and SIGHUP in a launch
    assert signalled.count(("launch", "server.launch")) >= 1 and len(signalled) >= 2, cuts
    assert launched > sum(1 for c in store_calls(home, session) if c.name == "server.launch")
    text = run(cli, home, faults, "show", session).stdout
    assert text.count("interrupted at about ") == len(signalled) and "made again on resume" in text
    assert text.count("cut short (killed, or interrupted between calls)") == len(cuts) - len(signalled)
