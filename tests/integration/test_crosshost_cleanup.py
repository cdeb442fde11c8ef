"""Cross-host arms' reference host left tidy: after an interrupt, the clean-up stops a reference
server there (its pid file `trials/<host>/reference.pid`, a real process running in the reference
copy) and removes that copy, a real git worktree of the host's checkout
(agent/sessions/interrupts.py); a killed attempt's leftovers are undone by the resumed step
(agent/decision/arms/crosshost.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext, need
from agent.decision.arms.referencehost import ReferenceHost
from agent.sessions.interrupts import stop_servers
from state.config.options import LoopOptions
from state.config.target import TargetConfig
from state.engines.workspace import CommitInfo, ReferenceCopyArgs
from state.sessions.loop import LoopState, Proposal
from tests.e2e.conftest import edited_diff, git, make_repo
from tests.e2e.test_adversarial import BACKEND, FIX
from tests.procs import processes_in
from tests.recorders import MemoryRecorder
from tools.door.live import LiveDoor
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
    target = cross_host_target(tmp_path, host_repo)
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


def test_a_killed_attempts_reference_host_is_tidied_before_the_rounds_and_given_back_after(
    tmp_path: Path,
) -> None:
    """What a SIGKILLed measure step left on the reference host (its checkout on the cross-host
    branch with the candidate committed, the reference copy, a server running in it) is stopped
    and undone by the resumed step's `prepare`, which builds the two trees again once (not on top
    of the killed attempt's), and `tidy` gives the checkout back as it was: the real door, git and
    processes."""
    host_repo = make_repo(tmp_path / "x-engine")
    diff = edited_diff(host_repo, tmp_path, {BACKEND: FIX})
    state = cross_host_state(tmp_path, host_repo, diff)
    door = LiveDoor(state.session_id, MemoryRecorder())
    rt = Runtime(context=LoopContext(door=door))
    killed = ReferenceHost(state, rt, "iteration-1")
    killed.prepare()  # the killed attempt got this far, and launched the reference there
    copy = need(killed.copy, "copy")
    proc = subprocess.Popen(["sleep", "300"], cwd=copy, start_new_session=True)
    (copy.parent / "reference.pid").write_text(json.dumps({"pid": proc.pid, "pgid": os.getpgid(proc.pid)}))
    branch = killed.run.branch
    assert git(host_repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
    try:
        again = ReferenceHost(state, rt, "iteration-1")
        again.prepare()
        assert proc.wait(timeout=10) is not None
    finally:
        if proc.poll() is None:
            proc.kill()
    assert git(host_repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
    assert git(host_repo, "rev-list", "--count", "main..HEAD").strip() == "1"  # the candidate, once
    gathered = FIX[1][1]  # the fix's gather-then-cast line: in the candidate tree, not the reference's
    assert gathered in (host_repo / BACKEND).read_text() and gathered not in (copy / BACKEND).read_text()
    assert again.trees["reference"][0] == copy and again.trees["candidate"][0] == host_repo
    assert again.tidy() is None
    assert git(host_repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert git(host_repo, "branch", "--list", "perfloop/*").strip() == ""
    assert git(host_repo, "status", "--porcelain").strip() == "" and not copy.exists()
    assert len(git(host_repo, "worktree", "list").strip().splitlines()) == 1


def cross_host_target(tmp_path: Path, host_repo: Path) -> TargetConfig:
    """A target whose reference host `x` is a local clone at `host_repo`."""
    return TargetConfig.model_validate(
        {
            "name": "t",
            "repo": str(tmp_path / "engine"),
            "launch": {"argv": ["x"], "stop_grace_s": 1},
            "measure": {"prompts": ["a"]},
            "decide": {"arms": "cross-host", "reference_host": "x"},
            "hosts": [{"name": "x", "repo": str(host_repo)}],
        }
    )


def cross_host_state(tmp_path: Path, host_repo: Path, diff: str) -> LoopState:
    """A session measuring the fix with cross-host arms, host `x` its reference host."""
    target = cross_host_target(tmp_path, host_repo)
    proposal = Proposal(
        iteration=1, source="fix", title="fix", explanation="e", diff=diff, files=[BACKEND],
        expected_gain_share=0.5, expected_gain_ms=None, evidence=[],
    )  # fmt: skip
    pending = CommitInfo(sha="1" * 40, branch="perfloop/s1", subject="fix", trailers={}, parent_sha="0" * 40)
    return LoopState(
        session_id="s1",
        target=target,
        options=LoopOptions(session_dir=tmp_path / "home" / "sessions" / "s1", python="python3"),
        proposal=proposal,
        pending_commit=pending,
    )
