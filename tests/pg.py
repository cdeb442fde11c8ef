"""A real, throwaway PostgreSQL server for the tests (Debian's `postgresql` package; `make
system-deps` installs it): `initdb` in a fresh folder under /tmp, TCP on 127.0.0.1 at a free port
with a password (scram), the unix socket in that folder, fsync off. initdb refuses to run as root,
so as root (CI) the cluster belongs to `nobody`. One server per test run; each test that asks for
`pg_url` gets a database of its own.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL's initdb is not installed: run `make system-deps` (apt postgresql)")
    return Path(initdb).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """A running cluster; `url(db)` is a postgresql:// URL with the password."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="perfloop-pg-"))
        self.password = "pg-" + secrets.token_hex(8)
        self.port = _free_port()
        self.as_user: list[str] = []
        (self.dir / "pw").write_text(self.password)
        if os.geteuid() == 0:
            self.as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
            shutil.chown(self.dir, "nobody", "nogroup")
            shutil.chown(self.dir / "pw", "nobody", "nogroup")
        self._pg("initdb", "-D", str(self.dir / "data"), "-U", "perfloop", f"--pwfile={self.dir / 'pw'}",
                 "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")  # fmt: skip
        self.start()

    def start(self) -> None:
        """Start the cluster (again, after `halt`: its databases as they were)."""
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        )
        self._pg(
            "pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-o", opts, "-w", "start"
        )

    def halt(self, mode: str = "fast") -> None:
        """Stop the server, its data kept (`fast`: an administrator's stop, every connection
        ended; `immediate`: a crash, recovered from the WAL at the next start)."""
        self._pg("pg_ctl", "-D", str(self.dir / "data"), "-m", mode, "-w", "stop")

    def _pg(self, prog: str, *args: str) -> str:
        proc = subprocess.run(
            [*self.as_user, str(self.bindir / prog), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{prog} failed: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://perfloop:{self.password}@127.0.0.1:{self.port}/{db}"

    def sql(self, statement: str, db: str = "postgres") -> str:
        """Run one statement with psql over the unix socket; its unaligned output."""
        return self._pg("psql", "-h", str(self.dir), "-p", str(self.port), "-U", "perfloop", "-d", db,
                        "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", statement)  # fmt: skip

    def dump(self, db: str) -> bytes:
        """The whole database as pg_dump writes it (every table's contents)."""
        return self._pg("pg_dump", "-h", str(self.dir), "-p", str(self.port), "-U", "perfloop", db).encode()

    def new_db(self) -> str:
        name = "t_" + secrets.token_hex(6)
        self.sql(f"CREATE DATABASE {name}")
        return name

    def stop(self) -> None:
        """Stop the server and remove its cluster."""
        try:
            self.halt("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    server = PgServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> str:
    """A fresh, empty database on the test PostgreSQL server, as a URL with its password."""
    return pg_server.url(pg_server.new_db())
