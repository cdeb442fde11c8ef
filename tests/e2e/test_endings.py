"""Every ending of a session that is not the loop's own leaves nothing running and resumes: here
an exception raised inside a running session (a bug, a library's error), injected at a fault point
(`node:measure raise`, tools/door/faults.py). Real CLI processes (tests/forkcli.py), real demo
servers, real git repos, SQLite store."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.target import load_target
from agent.sessions.holding import holder_line
from tests.e2e.conftest import (
    PERFLOOP,
    git,
    kept_unless_drifted,
    last_json,
    make_repo,
    perfloop,
    write_target,
)
from tests.e2e.test_durable import dirty, tree
from tests.e2e.test_interrupts import CAST_FIX, finished_like_uninterrupted, nothing_left, run
from tests.forkcli import ForkedCli
from tests.pg import PgServer
from tests.procs import processes_in
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> Iterator[ForkedCli]:
    """One pre-imported interpreter for the module's `perfloop` commands."""
    with ForkedCli(tmp_path_factory.mktemp("cli"), dict(os.environ)) as z:
        yield z


@pytest.mark.timeout(900)
def test_internal_error_stops_every_server_and_resume_finishes(cli: ForkedCli, tmp_path: Path) -> None:
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    target = write_target(tmp_path / "t.toml", repo, looks=1, arms="interleaved")
    faults.write_text("node:measure raise\n")  # the candidate and the reference beside it run
    first = run(cli, home, faults, "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1")
    assert first.returncode == 3, first.stderr[-2000:]
    session = last_json(run(cli, home, faults, "sessions", "--json"))[0]["id"]
    [line] = [ln for ln in first.stderr.splitlines() if "error" in ln]
    assert line.startswith("internal error: InjectedFault: fault injected at node:measure; servers stopped; ")
    assert f"continue with `perfloop resume {session}`" in line
    nothing_left(repo, home, session)
    info = SessionStore.open(home).get_session(session)
    assert info is not None and info.status == "interrupted"  # resumable
    again = run(
        cli, home, faults, "run", "--approve", "auto", str(target), "--json"
    )  # a new session on its checkout
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert f"is held by session {session} (interrupted); continue it with `perfloop resume {session}`" in (
        again.stderr
    )
    assert len(SessionStore.open(home).list_sessions()) == 1  # nothing recorded
    finished_like_uninterrupted(cli, home, faults, session)
    nothing_left(repo, home, session)


@pytest.mark.timeout(600)
def test_a_held_checkout_is_refused_and_abandon_gives_it_back(cli: ForkedCli, tmp_path: Path) -> None:
    """A session paused for approval holds its checkout (session branch, instrumentation, the
    user's uncommitted work carried onto it): a second `run` on it is refused in one line, from
    this store and, by the branch it is on, from another; `abandon` gives the checkout back as it
    was found, byte for byte, and marks the session abandoned."""
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    faults.write_text("")
    dirty(repo)
    (repo / "notes.txt").write_text("the user's untracked file\n")
    found = tree(repo)
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    paused = run(cli, home, faults, "run", str(target), "--approve", "manual", "--json")
    assert paused.returncode == 0, paused.stderr[-2000:]
    session = last_json(paused)["session"]
    assert last_json(paused)["status"] == "paused"
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"perfloop/{session}"
    held = tree(repo)
    assert held != found  # the dormant profiler is in the hook file

    second = run(cli, home, faults, "run", "--approve", "auto", str(target), "--json")
    assert second.returncode == 2 and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert f"is held by session {session} (paused); continue it with `perfloop approve {session}`" in (
        second.stderr
    )
    assert f"`perfloop abandon {session}`" in second.stderr
    elsewhere = run(
        cli, tmp_path / "other-home", faults, "run", "--approve", "auto", str(target), "--json"
    )  # another store
    assert elsewhere.returncode == 2, elsewhere.stderr
    assert f"is on branch perfloop/{session} of a perfloop session not in " in elsewhere.stderr
    assert tree(repo) == held and len(SessionStore.open(home).list_sessions()) == 1

    gone = run(cli, home, faults, "abandon", session)
    assert gone.returncode == 0, gone.stderr[-2000:]
    assert (
        f"session {session} abandoned; {repo} is back on main" in gone.stdout and "not all" not in gone.stdout
    )
    assert tree(repo) == found  # instrumentation out, the user's changes as they were
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert f"perfloop/{session}" not in git(repo, "branch", "--list")  # it held no commit
    nothing_left(repo, home, session)
    info = SessionStore.open(home).get_session(session)
    assert info is not None and info.status == "abandoned"
    twice = run(cli, home, faults, "abandon", session)
    assert twice.returncode == 2 and "is abandoned: only a running" in twice.stderr


@pytest.mark.timeout(900)
def test_a_server_killed_while_the_baseline_is_measured_leaves_the_session_resumable(
    cli: ForkedCli, tmp_path: Path
) -> None:
    """The baseline server SIGKILLed by an outside process (the OOM killer) while the baseline is
    measured: the session stops (exit 1) with one line naming the server and `perfloop resume ID`;
    nothing runs; the checkout stays the session's (held: a new `run` is refused); `resume` finds
    the server gone, launches it again and finishes like an uninterrupted session, and the
    recording replays (the killed attempt's calls superseded)."""
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    faults.write_text("")
    dirty(repo)
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    env = {**os.environ, "PERFLOOP_HOME": str(home)}
    proc = subprocess.Popen(
        [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    killed: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline and proc.poll() is None:
            for latest in home.glob("sessions/*/progress.json"):
                if "measuring baseline: request 2/" in latest.read_text(errors="replace"):
                    killed = processes_in(repo)
                    for pid in killed:
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert killed, f"the baseline was never seen measured: {err[-2000:]}"
    assert proc.returncode == 1 and out == "", err[-2000:]
    session = last_json(run(cli, home, faults, "sessions", "--json"))[0]["id"]
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert line.startswith("error: server #1 (pid ") and "stopped while the baseline was measured" in line
    assert "killed from outside (the OOM killer?), or it crashed (its log: " in line
    assert line.endswith(f"servers stopped; continue with `perfloop resume {session}`"), line
    nothing_left(repo, home, session)
    info = SessionStore.open(home).get_session(session)
    assert info is not None and info.status == "interrupted"  # resumable
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"perfloop/{session}"  # still held
    assert holder_line(SessionStore.open(home), load_target(target), "this store") is not None
    resumed = finished_like_uninterrupted(cli, home, faults, session)
    assert "is not running; going back to launch" in resumed, resumed[-2000:]
    nothing_left(repo, home, session)


def progress_reaches(home: Path, text: str, proc: subprocess.Popen, timeout_s: float = 300) -> None:
    """Wait until the running session's progress line (its progress.json) holds `text`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if any(text in p.read_text(errors="replace") for p in home.glob("sessions/*/progress.json")):
            return
        time.sleep(0.05)
    raise AssertionError(f"the session never showed {text!r} (exit {proc.poll()})")


@pytest.mark.timeout(900)
def test_the_postgres_store_restarted_then_down_mid_session(tmp_path: Path) -> None:
    """The PostgreSQL store restarted while the baseline is measured: the session reconnects (one
    warning line) and goes on. Then stopped, and kept down past the reconnect window, while the
    candidate is measured: one line naming the store, servers stopped, exit 2. Every record kept;
    once the store is back, `perfloop resume` finishes the session like an uninterrupted one."""
    pg = PgServer()  # its own server: stopping it hurts no other test
    try:
        db = pg.new_db()
        url = pg.url(db)
        repo, home = make_repo(tmp_path / "engine"), tmp_path / "home"
        target = write_target(tmp_path / "t.toml", repo, looks=1)
        env = {"PERFLOOP_STORE": url, "PERFLOOP_STORE_RECONNECT_SECONDS": "15"}
        proc = subprocess.Popen(
            [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1"],
            env={**os.environ, "PERFLOOP_HOME": str(home), **env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip

        def recorded() -> int:
            return int(pg.sql("SELECT COUNT(*) FROM tool_calls", db))

        try:
            progress_reaches(home, "measuring baseline: request 2/", proc)
            before = recorded()
            pg.halt("fast")  # every connection ended, as an administrator's restart does
            pg.start()
            assert recorded() >= before  # kept (more: the session may have recorded since)
            progress_reaches(home, "measuring iteration-1: request 2/", proc)
            before = recorded()
            pg.halt("fast")  # and now it stays down
            _, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
        pg.start()
        assert proc.returncode == 2, err[-3000:]
        [session] = [p.name for p in (home / "sessions").iterdir()]
        where = f"postgresql://perfloop@127.0.0.1:{pg.port}/{db}"
        lost = [ln for ln in err.splitlines() if ln.startswith("warning: the connection to the session")]
        assert lost and all(
            f"store {where} was lost (" in ln and "); reconnected after " in ln for ln in lost
        )
        [line] = [ln for ln in err.splitlines() if not ln.startswith("warning: ")]
        assert line.startswith(f"error: the session store {where} is unreachable ("), err
        assert line.endswith(f"; servers stopped; continue with `perfloop resume {session}`"), err
        assert pg.password not in err
        assert processes_in(repo) == [] and processes_in(home) == [], "a server was left running"
        assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"perfloop/{session}"  # resumable
        assert recorded() >= before  # the records made before it went down are all there

        done = perfloop(home, "resume", session, "--json", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        s = last_json(done)
        assert s["status"] == "done"
        if kept_unless_drifted(s["accepted"] == [CAST_FIX], s["decision"]):
            assert (s["rejected"], s["outputs_identical"]) == ([], True)
        replayed = perfloop(home, "replay", session, "--json", env=env)
        assert replayed.returncode == 0 and last_json(replayed)["matches_recording"] is True
        assert git(repo, "status", "--porcelain") == "" and processes_in(repo) == []
    finally:
        pg.stop()


@pytest.mark.timeout(600)
def test_a_trace_the_server_cannot_write_fails_the_session_cleanly(cli: ForkedCli, tmp_path: Path) -> None:
    """The server cannot write its trace: its launch command sets `ulimit -f 64` (a 64 KiB file size
    limit, RLIMIT_FSIZE), standing for a full disk (both fail the write; torch's export then leaves
    an empty trace and reports it written). The trace is not taken as a profile: the session aborts
    (exit 1) with one line naming the trace and the failed write; nothing runs; the repo is as it
    was found, not held: the user frees space and runs again (the loop's own ending: nothing of
    the session is worth resuming before a profile)."""
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    faults.write_text("")
    dirty(repo)
    found = tree(repo)
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    target.write_text(
        target.read_text().replace(
            'argv = ["bash", "launch.sh",',
            'argv = ["bash", "-c", "ulimit -f 64 && exec bash launch.sh \\"$@\\"", "launch",',
        )
    )
    proc = run(cli, home, faults, "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1")
    assert proc.returncode == 1, proc.stderr[-2000:]
    s = last_json(proc)
    assert s["status"] == "failed" and len(s["stop_reason"].splitlines()) == 1, s
    assert s["stop_reason"].startswith(f"aborted: profile: {home / 'sessions' / s['session']}/"), s
    assert s["stop_reason"].endswith(
        "/trace.json.gz: the trace is empty: the server could not write it (a full disk, or a file size "
        "limit); free space or raise the limit, and run again"
    ), s
    calls = SessionStore.open(home).tool_calls(s["session"])
    [take] = [c for c in calls if c.name == "profile.take"]
    assert take.error is not None and take.error.startswith("TraceError: ")
    assert "profile.read" not in [c.name for c in calls]  # no trace was read as a profile
    assert processes_in(repo) == [] and processes_in(home) == []
    assert tree(repo) == found and git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert holder_line(SessionStore.open(home), load_target(target), "this store") is None  # not held
