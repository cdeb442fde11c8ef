"""The low items of the security review, each on the real CLI or server: `--store` with a password
warns; $PERFLOOP_HOME and what perfloop writes in it are this user's alone; a hostile import is all
or nothing; an import whose replay diverges is one line (`report`) or a 4xx (`serve`); 64 idle
sockets do not starve `perfloop serve`."""

from __future__ import annotations

import gzip
import json
import socket
import sqlite3
import time
from pathlib import Path

from tests.e2e.conftest import perfloop
from tests.web.conftest import DEMO_RECORDING, Served
from tools.store.sessions import SessionStore

DEMO = json.loads(gzip.decompress(DEMO_RECORDING.read_bytes()))
SID = DEMO["session"]["id"]


def test_a_store_url_with_a_password_on_the_command_line_warns(tmp_path: Path) -> None:
    out = perfloop(tmp_path / "home", "--store", "postgresql://u:pw-in-ps-123@127.0.0.1:1/db", "sessions")
    assert "--store holds a password, visible to other users in `ps`" in out.stderr, out.stderr
    assert "PERFLOOP_STORE" in out.stderr and "pw-in-ps-123" not in out.stderr


def test_the_home_and_its_files_are_private(tmp_path: Path) -> None:
    """A fresh home (0700) and an existing one left open (made 0700); every file perfloop wrote in
    it, the SQLite store and its journal included, is the user's alone."""
    home = tmp_path / "home"
    assert perfloop(home, "import", str(DEMO_RECORDING)).returncode == 0
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o755)
    opened.chmod(0o755)
    assert perfloop(opened, "sessions").returncode == 0
    for where in (home, opened):
        assert where.stat().st_mode & 0o777 == 0o700, oct(where.stat().st_mode)
        written = [p for p in where.rglob("*")]
        assert written and all(p.stat().st_mode & 0o077 == 0 for p in written), [
            (p.name, oct(p.stat().st_mode)) for p in written if p.stat().st_mode & 0o077
        ]


def test_a_hostile_import_leaves_nothing_half_written(tmp_path: Path) -> None:
    """A store peer planted a row under the session's id (its last call's number): the import
    fails at the last call. Nothing of it stays (the planted row aside), in one line, exit 2."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    SessionStore.open(home).close()
    with sqlite3.connect(home / "sessions.sqlite") as db:
        db.execute("INSERT INTO tool_calls (session_id, seq, record) VALUES (?, ?, '{}')", (SID, 20))
    out = perfloop(home, "import", str(DEMO_RECORDING))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "nothing was imported" in out.stderr
    with sqlite3.connect(home / "sessions.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM inputs").fetchone() == (0,)
        assert db.execute("SELECT seq FROM tool_calls").fetchall() == [(20,)]


def test_a_diverging_import_is_one_line_and_a_4xx(tmp_path: Path) -> None:
    """A recording cut short (its last calls gone): `report` says so in one line (exit 2) and the
    approval page answers 422 with the reason, not an internal error."""
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(json.dumps({**DEMO, "tool_calls": DEMO["tool_calls"][:-3]}).encode()))
    home = tmp_path / "home"
    assert perfloop(home, "import", str(cut)).returncode == 0
    out = perfloop(home, "report", SID, "--output", str(tmp_path / "r.html"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "does not replay here" in out.stderr
    served = Served(home)
    try:
        for path in (f"/sessions/{SID}", f"/sessions/{SID}/report.html"):
            status, body = get(served, path)
            assert status == 422 and b"does not replay here" in body, (status, body[:300])
    finally:
        served.stop()


def get(served: Served, path: str, timeout: float = 30) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", served.port), timeout=timeout) as s:
        s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\nAuthorization: Bearer {served.token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def test_64_idle_sockets_do_not_starve_serve(tmp_path: Path) -> None:
    """64 sockets opened without a word (no token needed to open one): a real request is answered
    at once, and the idle sockets are closed by the server within seconds."""
    home = tmp_path / "home"
    assert perfloop(home, "import", str(DEMO_RECORDING)).returncode == 0
    served = Served(home)
    idle = []
    try:
        assert get(served, "/api/sessions")[0] == 200  # warm
        idle = [socket.create_connection(("127.0.0.1", served.port), timeout=60) for _ in range(64)]
        t0 = time.monotonic()
        status, _ = get(served, f"/api/sessions/{SID}")
        answered_s = time.monotonic() - t0
        assert status == 200 and answered_s < 10, (status, answered_s)
        t0 = time.monotonic()
        assert all(s.recv(1) == b"" for s in idle)  # closed by the server
        assert time.monotonic() - t0 < 45
    finally:
        for s in idle:
            s.close()
        served.stop()
