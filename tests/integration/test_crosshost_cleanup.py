"""After an interrupt, the clean-up stops a cross-host reference server on the reference host (its
pid file `trials/<host>/reference.pid`, a real process running in the reference copy there) and
removes that copy, a real git worktree of the host's checkout (agent/sessions/interrupts.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from agent.sessions.interrupts import stop_servers
from state.loop import LoopState
from state.options import LoopOptions
from state.target import TargetConfig
from state.workspace import ReferenceCopyArgs
from tests.e2e.conftest import git
from tests.procs import processes_in
from tools.workspace import reference


def test_an_interrupted_cross_host_session_stops_the_reference_host_server(tmp_path: Path) -> None:
    host_repo = tmp_path / "x-engine"
    host_repo.mkdir()
    (host_repo / "f.txt").write_text("1\n")
    git(host_repo, "init", "-q", "-b", "main")
    git(host_repo, "-c", "user.name=u", "-c", "user.email=u@x", "add", "-A")
    git(host_repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "engine")
    session_dir = tmp_path / "home" / "sessions" / "s1"
    there = session_dir / "trials" / "x"
    head = git(host_repo, "rev-parse", "HEAD").strip()
    reference.reference_copy(ReferenceCopyArgs(repo=host_repo, dest=there / "reference", commit=head))
    proc = subprocess.Popen(["sleep", "300"], cwd=there / "reference", start_new_session=True)
    (there / "reference.pid").write_text(json.dumps({"pid": proc.pid, "pgid": os.getpgid(proc.pid)}))
    target = TargetConfig.model_validate(
        {
            "name": "t",
            "repo": str(tmp_path / "engine"),
            "launch": {"argv": ["x"], "stop_grace_s": 1},
            "measure": {"prompts": ["a"]},
            "decide": {"arms": "cross-host", "reference_host": "x"},
            "hosts": [{"name": "x", "repo": str(host_repo)}],
        }
    )
    state = LoopState(
        session_id="s1", target=target, options=LoopOptions(session_dir=session_dir, python="python3")
    )
    try:
        stop_servers(state, None, lambda host: None)
        assert proc.wait(timeout=10) is not None and processes_in(there) == []
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (there / "reference").exists() and not (there / "reference.pid").exists()
    assert len(git(host_repo, "worktree", "list").strip().splitlines()) == 1
