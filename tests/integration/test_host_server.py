"""The local host and server control against real processes: start, health, crash, hang, stop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from state.config.target import LaunchConfig
from state.door.calls import LaunchArgs, ServerArgs
from tests.launching import launch_args as shared_launch_args
from tests.procs import processes_in
from tools import progress, server
from tools.errors import ServerError
from tools.hosts import local as host


def launch_args(
    tmp_path: Path, argv: list[str], timeout_s: float = 20.0, health_path: str = "/", **launch
) -> LaunchArgs:
    return shared_launch_args(
        tmp_path,
        LaunchConfig(
            argv=argv, health_path=health_path, **launch, startup_timeout_s=timeout_s, stop_grace_s=2
        ),
        tmp_path / "logs" / "server.log",
    )


def test_run_captures_output_and_kills_the_group_on_timeout(tmp_path: Path) -> None:
    ok = host.run(["bash", "-c", "echo out; echo err >&2; exit 3"], tmp_path)
    assert (ok.returncode, ok.stdout, ok.stderr) == (3, "out\n", "err\n")
    slow = host.run(["bash", "-c", "sleep 30 & sleep 30"], tmp_path, timeout_s=0.5)
    assert slow.returncode < 0 and "timeout" in slow.stderr and slow.duration_s < 10


def test_a_real_server_launches_healthy_and_stops_by_group(tmp_path: Path) -> None:
    handle = server.launch(
        launch_args(
            tmp_path,
            ["{python}", "-m", "http.server", "{port}", "--bind", "127.0.0.1"],
            base_url="http://localhost:{port}/",
        )
    )
    assert handle.base_url == f"http://localhost:{handle.port}" and handle.startup_s < 20
    assert handle.process.pid == handle.process.pgid
    status = server.status(ServerArgs(server=handle))
    assert status.alive and status.healthy
    stopped = server.stop(ServerArgs(server=handle, grace_s=5))
    assert not stopped.killed
    assert host.group_members(handle.process.pgid) == []
    assert not server.status(ServerArgs(server=handle)).alive


HTTP_SERVER = ["{python}", "-m", "http.server", "{port}", "--bind", "127.0.0.1"]


def test_health_generate_404_falls_back_to_health_on_a_real_server(tmp_path: Path) -> None:
    """SGLang's /health_generate where the build lacks it: python's http.server in a folder holding a
    file `health` answers 404 there and 200 on /health, so launch gets healthy through /health (well
    before its timeout) and the handle keeps that path; where /health_generate exists it is kept."""
    (tmp_path / "health").write_text("ok\n")
    handle = server.launch(launch_args(tmp_path, HTTP_SERVER, timeout_s=15, health_path="/health_generate"))
    try:
        assert handle.health_path == "/health" and handle.startup_s < 10
        assert server.status(ServerArgs(server=handle)).healthy  # later checks use /health too
        log = (tmp_path / "logs" / "server.log").read_text()
        assert '"GET /health_generate HTTP/1.1" 404' in log and '"GET /health HTTP/1.1" 200' in log
    finally:
        server.stop(ServerArgs(server=handle, grace_s=5))
    (tmp_path / "health_generate").write_text("ok\n")
    handle = server.launch(launch_args(tmp_path, HTTP_SERVER, timeout_s=15, health_path="/health_generate"))
    try:
        assert handle.health_path == "/health_generate"
    finally:
        server.stop(ServerArgs(server=handle, grace_s=5))


def test_a_server_that_ignores_term_is_killed_with_its_children(tmp_path: Path) -> None:
    script = "trap '' TERM; sleep 300 & python3 -m http.server $0 --bind 127.0.0.1; wait"
    handle = server.launch(launch_args(tmp_path, ["bash", "-c", script, "{port}"]))
    assert len(host.group_members(handle.process.pgid)) >= 2
    t0 = time.monotonic()
    assert server.stop(ServerArgs(server=handle, grace_s=1)).killed
    assert time.monotonic() - t0 < 10
    assert host.group_members(handle.process.pgid) == []
    assert processes_in(tmp_path) == []


def test_a_crash_at_start_reports_exit_code_and_log_line(tmp_path: Path) -> None:
    args = launch_args(tmp_path, ["bash", "-c", "echo loading; echo 'ImportError: no module x' >&2; exit 7"])
    with pytest.raises(ServerError, match=r"exited with code 7 during start-up .*ImportError: no module x"):
        server.launch(args)


def test_a_launch_again_after_a_resume_quotes_its_own_log_lines_only(tmp_path: Path) -> None:
    """Issue 63 item 8: a resumed session's launch writes to the log of the attempt cut short (the
    same launch number), and its lines quoted that server's last one ("shutting down")."""
    args = launch_args(tmp_path, ["bash", "-c", "exit 7"])
    args.log_path.parent.mkdir(parents=True, exist_ok=True)
    args.log_path.write_text("INFO: Uvicorn running\nINFO: shutting down\n")  # the killed server's
    with pytest.raises(ServerError, match=r"exited with code 7 during start-up .*: \(empty log\)$"):
        server.launch(args)
    assert host.tail(args.log_path, 3) == "INFO: Uvicorn running\nINFO: shutting down"  # kept
    lines: list[str] = []
    progress.set_reporter(lines.append)
    try:  # the same launch number again: its wait lines say so, and quote its own log
        script = "echo booting; sleep 0.6; python3 -m http.server $0 --bind 127.0.0.1"
        again = launch_args(tmp_path, ["bash", "-c", script, "{port}"])
        handle = server.launch(again)
    finally:
        progress.set_reporter(lambda message: None)
    server.stop(ServerArgs(server=handle, grace_s=1))
    waits = [ln for ln in lines if ": waiting for " in ln]
    assert waits and all(ln.startswith("launch #") and " (again): " in ln for ln in waits), lines
    assert not any("shutting down" in ln for ln in waits), waits


def test_a_hung_start_is_stopped_after_the_timeout(tmp_path: Path) -> None:
    args = launch_args(tmp_path, ["bash", "-c", "echo still loading; sleep 300"], timeout_s=1.5)
    with pytest.raises(ServerError, match=r"did not become healthy within 2s and was stopped.*still loading"):
        server.launch(args)
    assert processes_in(tmp_path) == []


def test_a_missing_program_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="cannot start 'no-such-binary-xyz'"):
        server.launch(launch_args(tmp_path, ["no-such-binary-xyz"]))


@pytest.mark.parametrize("url", ["127.0.0.1:{port}", "ftp://h:{port}", "http://:80", "http://h:{port}/v1"])
def test_a_bad_base_url_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(
        ValueError, match=r"is not a server base URL; write it like http://127.0.0.1:\{port\}"
    ):
        LaunchConfig(argv=["x"], base_url=url)
