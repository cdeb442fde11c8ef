"""The health check proves it reached the server perfloop started, not whatever holds the port."""

from __future__ import annotations

import http.server
import os
import socket
import threading
from pathlib import Path

import pytest

from tests.integration.test_host_server import launch_args
from tests.procs import processes_in
from tools import server
from tools.errors import ServerError
from tools.hosts.listeners import holders, owned_by, parse_listeners, port_in_use
from tools.http import free_port


class Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # every path answers 200, /health included
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def foreign():
    """Another HTTP server (in this test process) that answers every health path."""
    srv = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_a_port_held_by_another_server_is_not_taken_for_ours(tmp_path: Path, foreign: int) -> None:
    assert port_in_use(foreign) and os.getpid() in holders(foreign)
    args = launch_args(tmp_path, ["{python}", "-c", "import time; time.sleep(60)"], port=foreign)
    with pytest.raises(ServerError, match=f"port {foreign} answers / but is held by process {os.getpid()}"):
        server.launch(args)
    assert processes_in(tmp_path) == []  # ours was stopped


def test_check_listener_false_takes_the_answer_on_the_port_as_the_servers(
    tmp_path: Path, foreign: int
) -> None:
    """`launch.check_listener = false` (e.g. a container, whose listening socket the host cannot
    see): the same foreign answer as above is taken as the server's, and the launch succeeds."""
    args = launch_args(
        tmp_path, ["{python}", "-c", "import time; time.sleep(60)"], port=foreign, check_listener=False
    )
    handle = server.launch(args)
    try:
        assert handle.port == foreign and owned_by(foreign, [handle.process.pid]) is False
    finally:
        server.stop(server.ServerArgs(server=handle, grace_s=5))
    assert processes_in(tmp_path) == []


def test_our_own_server_owns_its_port(tmp_path: Path) -> None:
    handle = server.launch(
        launch_args(tmp_path, ["{python}", "-m", "http.server", "{port}", "--bind", "127.0.0.1"])
    )
    try:
        assert owned_by(handle.port, [handle.process.pid]) is True
        assert owned_by(handle.port, [os.getpid()]) is False
    finally:
        server.stop(server.ServerArgs(server=handle, grace_s=5))


def test_a_port_taken_after_it_was_chosen_is_launched_again_on_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a busy host loses (a CI run's candidate, over SSH): another process binds the port
    `free_port` chose before the server does. The server exits with EADDRINUSE and the launch is
    tried again on a fresh port; with no retry left, that exit is the error, and nothing runs."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    chosen: list[int] = []

    def choose() -> int:  # the taken port first, then free ones
        chosen.append(free_port() if chosen else port)
        return chosen[-1]

    monkeypatch.setattr(server, "free_port", choose)
    argv = ["{python}", "-m", "http.server", "{port}", "--bind", "127.0.0.1"]
    try:
        handle = server.launch(launch_args(tmp_path, argv))
        try:
            assert chosen[0] == port and handle.port == chosen[1] != port
            assert owned_by(handle.port, [handle.process.pid]) is True
            assert "Address already in use" in (tmp_path / "logs" / "server.log").read_text()
        finally:
            server.stop(server.ServerArgs(server=handle, grace_s=5))
        chosen.clear()
        with pytest.raises(ServerError, match="during start-up .*Address already in use"):
            server.launch(launch_args(tmp_path, argv, listen_retries=0))
    finally:
        taken.close()
    assert processes_in(tmp_path) == [] and chosen == [port]


def test_parse_listeners() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1\n"
        "   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1\n"
        "   2: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1\n"
    )
    assert parse_listeners(table, 8080) == {111}
    assert parse_listeners(table, 80) == {333}
    assert parse_listeners(table, 81) == set()
