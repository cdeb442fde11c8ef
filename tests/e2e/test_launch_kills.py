"""SIGKILL at each point of a launch, then `resume`: no server of the session runs after it ends.

The kills fall on the reference server's launch beside the candidate (interleaved arms), the launch
whose server the resume never knew of in issue 50: the resumed step makes the reference copy again,
so a server still running from the old one has a deleted working directory and no longer looked
like the session's. One session takes the three points in turn (CI time), each resume killed at the
next: before the spawn (the pid file holds only the intent), between the spawn and the pid file
(the server runs, nothing names its pid), while it waits for health (the pid file names it). Real
CLI processes (tests/forkcli.py), real demo servers, a real git repo.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import git, kept_unless_drifted, last_json, make_repo, write_target
from tests.forkcli import ForkedCli
from tests.procs import processes_in

pytestmark = pytest.mark.e2e
CAST_FIX = "kv-cache-full-pool-cast"
POINTS = ("server:spawning", "server:forked", "server:spawned")


@pytest.fixture(scope="module")
def cli(tmp_path_factory) -> Iterator[ForkedCli]:
    with ForkedCli(tmp_path_factory.mktemp("cli"), dict(os.environ)) as z:
        yield z


def run(cli: ForkedCli, home: Path, faults: Path, *args: str) -> subprocess.CompletedProcess:
    return cli(*args, env={**os.environ, "PERFLOOP_HOME": str(home), "PERFLOOP_FAULTS_FILE": str(faults)})


@pytest.mark.timeout(900)
def test_sigkill_at_each_point_of_a_launch_then_resume_leaves_no_server(
    cli: ForkedCli, tmp_path: Path
) -> None:
    repo, home, faults = make_repo(tmp_path / "engine"), tmp_path / "home", tmp_path / "faults"
    target = write_target(tmp_path / "t.toml", repo, looks=1, arms="interleaved")
    faults.write_text("server:spawning pass\nserver:spawning pass\nserver:spawning\n")  # launch #3
    killed = run(
        cli, home, faults, "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1"
    )
    session = last_json(run(cli, home, faults, "sessions", "--json"))[0]["id"]
    folder, left = home / "sessions" / session, set[int]()
    for number, (point, after) in enumerate(zip(POINTS, [*POINTS[1:], None], strict=True), start=3):
        assert killed.returncode == -signal.SIGKILL and faults.read_text() == "", killed.stderr[-2000:]
        record = json.loads((folder / "reference.pid").read_text())
        # the intent, recorded first; each resume numbers the launch past the one its pid file
        # names (issue 63 item 8: the killed launch's call was never recorded)
        assert record["mark"] == f"{folder / 'reference.pid'}#{number}", point
        assert ("pid" in record) == (point == "server:spawned"), point
        # The server this kill left (from the reference copy), and not the last one's: the resume
        # stopped that before it made the copy again.
        running = set(processes_in(folder))
        assert bool(running) == (point != "server:spawning") and not running & left, (point, running, left)
        left = running
        # The candidate server survived the SIGKILL and is reused: the reference is the next launch.
        faults.write_text(f"{after}\n" if after else "")
        killed = run(cli, home, faults, "resume", session, "--json")

    assert killed.returncode == 0, killed.stderr[-3000:]
    assert "stopped the killed attempt's servers that still ran" in killed.stderr
    s = last_json(killed)
    assert s["status"] == "done" and s["server_launches"] == 6  # #3 killed before its spawn
    assert (folder / "logs" / "server-6-reference.log").exists()
    assert not (folder / "logs" / "server-3-reference.log").exists()
    if kept_unless_drifted(s["accepted"] == [CAST_FIX], s["decision"]):
        assert s["outputs_identical"] is True
    assert processes_in(repo) == [] and processes_in(home) == [], "a server of the session still runs"
    assert len(git(repo, "worktree", "list").splitlines()) == 1
