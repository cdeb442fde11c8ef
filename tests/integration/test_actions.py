"""Starting the loop's server (agent/serving.py) against a real git repo and real server processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from langgraph.runtime import Runtime

from agent.context import LoopContext
from agent.serving import start_server
from state.config.options import LoopOptions
from state.config.target import LaunchConfig, MeasureConfig, TargetConfig
from state.door.calls import ServerArgs
from state.sessions.loop import LoopState
from tests.recorders import MemoryRecorder
from tools import server
from tools.door.live import LiveDoor
from tools.hosts import local as host


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=u", "-c", "user.email=u@x", *args], check=True)


def test_launch_reuses_a_healthy_server_on_the_same_tree_only(tmp_path: Path) -> None:
    """Same tree fingerprint and healthy: the running server is reused (no launch, no stop). A changed
    tree, or a server that died, gets a new launch (the old one stopped first)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "engine.py").write_text("x = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "engine")
    target = TargetConfig(
        name="t",
        repo=repo,
        launch=LaunchConfig(
            argv=["{python}", "-m", "http.server", "{port}", "--bind", "127.0.0.1"],
            health_path="/",
            startup_timeout_s=20,
            stop_grace_s=2,
        ),
        measure=MeasureConfig(prompts=["hi"]),
    )
    state = LoopState(
        session_id="s",
        target=target,
        options=LoopOptions(session_dir=tmp_path / "session", python=sys.executable),
    )
    calls = MemoryRecorder()
    runtime = Runtime(context=LoopContext(door=LiveDoor("s", calls)))
    runtime.context.door.node = "launch"

    def names_since(n: int) -> list[str]:
        return [c.name for c in calls.calls[n:]]

    first = start_server(state, runtime, instrumented=False)
    handles = [first]
    try:
        state = state.model_copy(update={"server": first, "launches": 1})
        n = len(calls.calls)
        assert start_server(state, runtime, instrumented=False) == first
        assert names_since(n) == ["repo.snapshot", "server.status"]
        assert host.group_members(first.process.pgid)  # still the same process

        (repo / "engine.py").write_text("x = 2\n")  # the tree changed: that server runs old code
        n = len(calls.calls)
        second = start_server(state, runtime, instrumented=False)
        handles.append(second)
        assert names_since(n) == ["repo.snapshot", "server.stop", "server.launch"]
        assert second.launch_number == 2 and second.tree_sha256 != first.tree_sha256
        assert host.group_members(first.process.pgid) == []

        state = state.model_copy(update={"server": second, "launches": 2})
        host.stop_group(second.process.pgid, 2)  # same tree, but the server is gone
        n = len(calls.calls)
        third = start_server(state, runtime, instrumented=False)
        handles.append(third)
        assert names_since(n) == ["repo.snapshot", "server.status", "server.stop", "server.launch"]
        assert third.launch_number == 3 and third.tree_sha256 == second.tree_sha256
    finally:
        for handle in handles:
            server.stop(ServerArgs(server=handle, grace_s=2))
