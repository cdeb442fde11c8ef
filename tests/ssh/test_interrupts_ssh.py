"""An interrupt while a host tool runs over SSH: the remote tool stops with perfloop, and the
server it had spawned is found by its pid file and stopped on the host (the clean-up's path)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.sessions.interrupts import run_tool
from state.config.target import LaunchConfig
from state.door.calls import PidFileArgs
from tests.launching import launch_args
from tests.procs import processes_in
from tools import interrupts, server
from tools.door.registry import spec_of
from tools.hosts.client import RemoteExecutor, ensure_package
from tools.hosts.ssh import SSHHost
from tools.interrupts import Interrupted


def wait_for(check, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_a_signal_stops_the_remote_launch_and_its_server_is_stopped_from_the_pid_file(
    host: SSHHost, tmp_path: Path
) -> None:
    pkg = Path(str(ensure_package(host)))
    executor = RemoteExecutor(host, sys.executable, ensure_package(host))
    work, pid_file = tmp_path / "work", tmp_path / "server.pid"
    work.mkdir()
    never_healthy = LaunchConfig(
        argv=["bash", "-c", "sleep 300"], health_path="/", startup_timeout_s=240, stop_grace_s=2
    )
    args = launch_args(work, never_healthy, tmp_path / "server.log", pid_file=pid_file)
    me = os.getpid()

    def term_once_spawned() -> None:
        if wait_for(pid_file.exists, 60):
            os.kill(me, signal.SIGTERM)

    threading.Thread(target=term_once_spawned, daemon=True).start()
    t0 = time.monotonic()
    with pytest.raises(Interrupted) as caught, interrupts.catching():
        executor.call(spec_of(server.launch), args)
    assert caught.value.exit_code == 143 and time.monotonic() - t0 < 60  # not the 240 s start-up wait
    assert wait_for(lambda: processes_in(pkg) == []), "the remote tool kept running"
    assert processes_in(work), "the server it spawned runs until the clean-up"
    run_tool(executor, server.stop_recorded, PidFileArgs(pid_file=pid_file, repo=work, grace_s=2))
    assert processes_in(work) == [] and not pid_file.exists()
