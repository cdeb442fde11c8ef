"""Process behaviour: determinism across restarts, SIGTERM, bad flags, port in use."""

import signal
import socket
import subprocess
import sys
import time

from tests.target.conftest import SMALL, TARGET, Server, chat, free_port, launch, wait_healthy

PROMPTS = ["The quick brown fox", "determinism", "a third prompt, longer than the others"]


def greedy_texts(server) -> list[str]:
    client = server.client()
    return [chat(client, p, max_tokens=24).choices[0].message.content for p in PROMPTS]


def test_greedy_output_identical_across_restart(start_server):
    first = start_server(*SMALL)
    before = greedy_texts(first)
    first.stop()
    assert greedy_texts(start_server(*SMALL)) == before


def test_sigterm_shuts_down_and_releases_port(tmp_path):
    port = free_port()
    server = Server(launch(TARGET, ["--port", str(port), *SMALL], tmp_path / "log"), port, tmp_path / "log")
    try:
        wait_healthy(server)
        started = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=5) == 0
        assert time.monotonic() - started < 5
        with socket.socket() as s:  # the port can be listened on again, as a relaunch would
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
    finally:
        server.stop()


def run_launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(TARGET / "launch.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHON": sys.executable},
    )


def test_unknown_flag_exits_2_with_one_line_error():
    result = run_launch("--port", "1", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--no-such-flag" in result.stderr


def test_port_in_use_exits_nonzero_with_one_line_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = run_launch("--port", str(port), *SMALL)
    assert result.returncode == 1
    assert result.stderr == f"mla_server: error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
