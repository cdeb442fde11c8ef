"""Two `perfloop resume` of one session started at the same moment: one runs it, the other is
refused in one line while the first still runs (a real race between two processes); on SQLite and
on a real PostgreSQL server (tests/pg.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import (
    PERFLOOP,
    assert_clean,
    kept_unless_drifted,
    last_json,
    make_repo,
    perfloop,
    write_target,
)
from tests.pg import PgServer
from tests.procs import processes_in

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_two_concurrent_resumes_one_runs_one_is_refused(
    scratch, store: str, pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERFLOOP_STORE", pg_server.url(pg_server.new_db()) if store == "postgres" else "")
    repo = make_repo(scratch.root / "engine")
    scratch.allow(repo)
    target = write_target(scratch.inputs / "t.toml", repo, looks=1)  # the fix is kept at its first look
    scratch.allow(target)
    faults = scratch.write("faults.txt", "node:baseline\n")
    env = {**os.environ, "PERFLOOP_HOME": str(scratch.home)}
    killed = subprocess.run(
        [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1"],
        env={**env, "PERFLOOP_FAULTS_FILE": str(faults)},
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    sid = last_json(perfloop(scratch.home, "sessions", "--json"))[0]["id"]

    def resume() -> subprocess.Popen:
        return subprocess.Popen(
            [str(PERFLOOP), "resume", sid, "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )

    racers = [resume(), resume()]  # started back to back: they race for the session's lock
    try:
        deadline = time.monotonic() + 300
        while all(p.poll() is None for p in racers) and time.monotonic() < deadline:
            time.sleep(0.05)
        loser = next(p for p in racers if p.poll() is not None)
        winner = racers[1 - racers.index(loser)]
        still_running = winner.poll() is None
        out, err = loser.communicate()
        assert loser.returncode == 2, (out, err)
        assert still_running, "the refused resume must end while the other still runs"
        assert f"session {sid} is already being run by perfloop process {winner.pid}" in err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        wout, werr = winner.communicate(timeout=600)
    finally:
        for p in racers:
            p.kill()
    assert winner.returncode == 0, werr[-2000:]
    s = last_json(subprocess.CompletedProcess([], 0, wout, werr))
    assert s["status"] == "done", (s["decision"], s["stop_reason"])
    kept_unless_drifted(s["accepted"] == ["kv-cache-full-pool-cast"], s["decision"])
    assert s["server_launches"] == 2  # the killed run's server was reused, never a second one at once
    assert processes_in(repo) == []
    assert_clean(repo, s)
