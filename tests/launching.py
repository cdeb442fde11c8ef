"""Launching a server in a test: the door's `LaunchArgs` for a test tree, and the demo server."""

from __future__ import annotations

import sys
from pathlib import Path

from state.config.target import LaunchConfig
from state.door.calls import LaunchArgs
from state.engines.process import ServerHandle
from tools import server

DEMO = Path(__file__).resolve().parents[1] / "examples" / "targets" / "mla_server"


def launch_args(repo: Path, launch: LaunchConfig, log_path: Path, **fields: object) -> LaunchArgs:
    """Arguments of `server.launch` for an uninstrumented first launch of `repo` (plus `fields`)."""
    values: dict = dict(
        repo=repo,
        launch=launch,
        python=sys.executable,
        log_path=log_path,
        tree_sha256="t",
        instrumented=False,
        profile_dir=None,
        launch_number=1,
    )
    return LaunchArgs(**{**values, **fields})


def launch_demo(argv: list[str], log_path: Path) -> ServerHandle:
    """The embedded demo server started with `argv` (`{port}` filled in), healthy; stop it with
    `server.stop`."""
    launch = LaunchConfig(argv=argv, env={"PYTHON": "{python}"}, startup_timeout_s=120, stop_grace_s=5)
    return server.launch(launch_args(DEMO, launch, log_path))
