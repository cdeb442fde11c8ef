"""SIGKILL at each point of a launch on an SSH host (before the spawn, between the spawn and its pid
file, during readiness), then `resume`: no server of the session runs on the host after it ends.

Over SSH the launch runs on the host (`python -m tools.hosts.remote`): the host's sessions get a
fault file from sshd (`SetEnv`; a daemon of the test's own, so no other test sees it) whose
`POINT STOP` freezes that process there: `server:spawning` before the spawn (its intent written),
`server:forked` right after it, before its pid file (the server runs on, named by no pid file and no
checkpoint), `server:spawned` with its pid file written, before readiness. Then perfloop is
SIGKILLed here and the frozen process there (the OOM killer's way). Real sshd, CLI, demo server
and git repo.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import PERFLOOP, git, kept_unless_drifted, last_json, make_repo, perfloop
from tests.procs import processes_in
from tests.ssh.conftest import Sshd, free_port
from tests.ssh.test_loop_over_ssh import remote_session_dir, ssh_target

CAST_FIX = "kv-cache-full-pool-cast"


def stopped_host_tool(faults: Path) -> int | None:
    """The pid of a `python -m tools.hosts.remote` process with `faults` as its fault file, stopped
    by a signal (state T), if one is."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            ours = f"PERFLOOP_FAULTS_FILE={faults}".encode() in (entry / "environ").read_bytes()
            if state == "T" and ours and b"tools.hosts.remote" in (entry / "cmdline").read_bytes():
                return int(entry.name)
        except (OSError, IndexError):
            continue
    return None


@pytest.mark.parametrize("point", ["server:spawning", "server:forked", "server:spawned"])
def test_sigkill_at_each_point_of_a_launch_on_the_host_then_resume(
    sshd: Sshd, tmp_path: Path, point: str
) -> None:
    faults = tmp_path / "host-faults"
    faults.write_text(f"{point} STOP\n")  # the first launch: the baseline server
    own = Sshd(sshd.dir, free_port(), env={"PERFLOOP_FAULTS_FILE": str(faults)})
    own.start()
    repo, home = make_repo(tmp_path / "engine"), tmp_path / "home"
    target = ssh_target(tmp_path / "t.toml", repo, own, tmp_path / "client", arms="sequential", looks=1)
    cli = subprocess.Popen(
        [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1"],
        env={**os.environ, "PERFLOOP_HOME": str(home)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while (
            (frozen := stopped_host_tool(faults)) is None
            and cli.poll() is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert frozen is not None and faults.read_text() == "", f"the launch never reached {point}"
        cli.kill()
        cli.wait()
        os.kill(frozen, signal.SIGKILL)
        session = last_json(perfloop(home, "sessions", "--json"))[0]["id"]
        host_dir = remote_session_dir(own, session)
        recorded = json.loads((host_dir / "server.pid").read_text())
        if point == "server:spawning":
            assert "pid" not in recorded and processes_in(repo) == []  # the intent only, nothing spawned
        else:  # the server runs on the host; its pid file names it only after the spawn's record
            assert processes_in(repo), "the spawned server runs on the host"
            assert ("pid" in recorded) is (point == "server:spawned"), recorded

        done = perfloop(home, "resume", session, "--json", timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        s = last_json(done)
        assert s["status"] == "done"
        if kept_unless_drifted(s["accepted"] == [CAST_FIX], s["decision"]):
            assert s["outputs_identical"] is True
            assert git(repo, "rev-list", "--count", f"main..{s['branch']}").strip() == "1"
        assert processes_in(repo) == [] and processes_in(host_dir) == [], "a server still runs on the host"
        shutil.rmtree(host_dir)
    finally:
        if cli.poll() is None:
            cli.kill()
        own.stop()
