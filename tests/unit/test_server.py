"""tools/server.py: the launch command built from the target's argv."""

from __future__ import annotations

from tools.server import build_argv


def test_command_building() -> None:
    assert build_argv(["{python}", "-m", "x", "--port", "{port}"], 8001, "/py") == [
        "/py",
        "-m",
        "x",
        "--port",
        "8001",
    ]
