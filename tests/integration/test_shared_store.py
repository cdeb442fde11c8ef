"""The session store on SQLite and on a real PostgreSQL server (tests/pg.py): the same behaviour on
both, a versioned schema migrated by perfloop, bad store URLs as one line, and the per-session lease
across two "machines" (two $PERFLOOP_HOMEs on one store), a SIGKILLed holder's lease expiring."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from state.door.records import ToolCallRecord
from state.measurement.aa import AASample
from state.sessions.session import SessionInfo
from tests.pg import PgServer
from tools.errors import ConfigError
from tools.store.db import MIGRATIONS, SCHEMA_VERSION, Db
from tools.store.sessions import SessionStore

PERFLOOP = Path(sys.executable).parent / "perfloop"
SID = "20261130-101500-a1b2"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path: Path) -> Iterator[SessionStore]:
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    s = SessionStore(tmp_path / "sessions.sqlite", url)
    yield s
    s.close()


def info(sid: str = SID, **kw) -> SessionInfo:
    base = dict(id=sid, created_at=datetime(2026, 11, 30, tzinfo=UTC), target_name="t", target_path=None,
                repo=Path("/r"), status="running", host="m1")  # fmt: skip
    return SessionInfo(**{**base, **kw})


def call(seq: int, name: str = "git.status", out: dict | None = None) -> ToolCallRecord:
    return ToolCallRecord(session_id=SID, seq=seq, node="n", name=name, input={"i": seq}, output=out or {"o": seq},
                          error=None, started_at=datetime(2026, 11, 30, tzinfo=UTC), duration_s=0.1)  # fmt: skip


def test_the_store_behaves_the_same_on_both_engines(store: SessionStore) -> None:
    store.put_session(info())
    store.put_session(info(status="done", host="m2"))  # an upsert, not a second row
    assert [(i.id, i.status, i.host) for i in store.list_sessions()] == [(SID, "done", "m2")]
    assert store.get_session("20261130-101500-ffff") is None
    for kind, value in [
        ("initial", {"a": 1}),
        ("answer", {"approved": True}),
        ("answer", {"approved": False}),
    ]:
        store.add_input(SID, kind, value)
    assert store.inputs(SID, "answer") == [{"approved": True}, {"approved": False}]
    for seq in range(4):
        store.record(call(seq, name="llm.chat" if seq == 3 else "git.status"))
    assert store.next_seq(SID) == 4
    assert store.supersede_after(SID, 2) == 2 and store.supersede_after(SID, 2) == 0
    assert [c.seq for c in store.tool_calls(SID)] == [0, 1]
    assert len(store.tool_calls(SID, include_superseded=True)) == 4
    for seq, task in ((4, "t-done"), (5, "t-killed"), (6, "t-done"), (7, None)):  # a parallel batch
        store.record(call(seq).model_copy(update={"task_id": task}))
    assert store.supersede_after(SID, 4, finished={"t-done"}) == 2  # the finished task's calls stay
    assert [(c.seq, c.task_id) for c in store.tool_calls(SID)] == [
        (0, None),
        (1, None),
        (4, "t-done"),
        (6, "t-done"),
    ]
    reused = store.superseded_call(SID, "llm.chat", {"i": 3})
    assert reused is not None and reused.seq == 3 and store.superseded_call(SID, "llm.chat", {"i": 9}) is None
    sample = lambda sid, loc: AASample(target_key="k", group="g", session_id=sid, launch_number=1,
                                       location_log=loc, requests=6)  # fmt: skip
    for s in (sample("a", 1.0), sample("b", 2.0), sample("a", 3.0)):  # the same launch again replaces
        store.add_aa(s)
    assert [x.location_log for x in store.aa_samples("k")] == [2.0, 3.0]
    assert store.db.version() == SCHEMA_VERSION


def test_an_older_sqlite_store_is_migrated_and_keeps_its_sessions(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite"
    old = sqlite3.connect(path)
    old.executescript(MIGRATIONS["sqlite"][0])  # what perfloop made before the schema had versions
    old.execute("INSERT INTO sessions VALUES (?, ?, ?)", (SID, "2026-11-30", info().model_dump_json()))
    old.commit()
    old.close()
    store = SessionStore(path)
    assert store.db.version() == SCHEMA_VERSION == 4
    assert store.get_session(SID) == info()
    store.db.run("INSERT INTO perfloop_schema VALUES (99)")
    store.close()
    with pytest.raises(
        ConfigError, match="schema version 99, newer than this perfloop's 4; upgrade perfloop"
    ):
        SessionStore(path)


def run_cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PERFLOOP), *args], env={**os.environ, "PERFLOOP_HOME": str(home), **env},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip


def test_bad_store_urls_are_one_line_without_the_password(tmp_path: Path, pg_server: PgServer) -> None:
    bad = run_cli(tmp_path / "h", "--store", "mysql://u:p@h/db", "sessions")
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: PERFLOOP_STORE / --store must be a postgresql://USER:PASSWORD@HOST")
    assert len(bad.stderr.strip().splitlines()) == 1
    wrong = pg_server.url("postgres").replace(pg_server.password, "wrong-password-123")
    refused = run_cli(tmp_path / "h", "sessions", PERFLOOP_STORE=wrong)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert (
        f"cannot connect to the session store postgresql://perfloop@127.0.0.1:{pg_server.port}/postgres"
        in (refused.stderr)
    )
    assert "password authentication failed" in refused.stderr and "wrong-password-123" not in refused.stderr


HOLD = """
import sys, time
from pathlib import Path
from agent.sessions.runner import Sessions
if sys.argv[4:] == ["on-cue"]:  # imported and ready: try only when told (a line on stdin)
    print("ready", flush=True)
    sys.stdin.readline()
with Sessions(Path(sys.argv[1])).lock(sys.argv[2]):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
print("released", flush=True)
"""


def holder(home: Path, hold_s: float, env: dict[str, str]) -> subprocess.Popen:
    """A real process on `home`'s "machine" holding the session's lease for `hold_s` seconds."""
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(home), SID, str(hold_s)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=home)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n", (
        proc.stderr.read() if proc.stderr else ""
    )
    return proc


def contend(home: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Another process (on `home`'s machine) trying to take the lease: exit 0 if it got it."""
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-c", HOLD, str(home), SID, "0"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=home)  # fmt: skip


def contend_on_cue(home: Path, env: dict[str, str]) -> subprocess.Popen:
    """A contender started ahead, already past its imports: it tries for the lease when `cue` says go,
    so the try lands within milliseconds of that moment however slow a loaded machine starts Python."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(home), SID, "0", "on-cue"], env=env, cwd=home,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def cue(proc: subprocess.Popen) -> tuple[int, str]:
    """Tell a contender started by `contend_on_cue` to try now: its exit status and stderr."""
    _, err = proc.communicate("go\n", timeout=60)
    return proc.returncode, err


def lease_clock(url: str, home: Path) -> tuple[float, float]:
    """The session's lease expiry and the database's clock now (seconds since the epoch)."""
    db = Db(url or None, home / "sessions.sqlite")
    try:
        ((expires_at, now),) = db.rows(
            f"SELECT expires_at, {db.now} FROM session_leases WHERE session_id = ?", (SID,)
        )
    finally:
        db.close()
    return float(expires_at), float(now)


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_two_machines_contend_for_one_session_and_a_killed_holders_lease_expires(
    engine: str, tmp_path: Path, request
) -> None:
    if engine == "postgres":  # two homes, one database: two machines
        url = request.getfixturevalue("pg_url")
        a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    else:  # one home (SQLite has one machine), two machine identities
        url, a = "", tmp_path / "home"
        b = a
    ttl = 3.0
    env = {**os.environ, "PERFLOOP_STORE": url, "PERFLOOP_LEASE_SECONDS": str(ttl), "PYTHONPATH": os.getcwd()}
    first = holder(a, 600, env)
    try:
        if engine == "sqlite":  # the contender shares the home: give it another machine's identity
            (a / "machine-id").write_text("other-machine")
        # The holder renews its lease: still refused once the database's clock is past the expiry
        # its lease had when first read here (polled, with a deadline; a sleep of 0.7 ttl was not).
        first_expiry, _ = lease_clock(url, a)
        deadline = time.monotonic() + ttl + 10
        while lease_clock(url, a)[1] <= first_expiry + 0.1:
            assert time.monotonic() < deadline, "the database's clock did not pass the first expiry"
            time.sleep(0.1)
        refused = contend(b, env)
        assert refused.returncode == 1
        last = refused.stderr.strip().splitlines()[-1]
        assert f"session {SID} is already being run by perfloop process {first.pid} on " in last
        assert "its lease then expires within" in last
        listed = json.loads(run_cli(b, "sessions", "--json", PERFLOOP_STORE=url).stdout or "[]")
        assert listed == []  # no session row was written, only the lease
        # Dead, but on another machine: nobody here can tell, so wait. The contender tries at once
        # (a fresh process could take longer than the lease's remaining seconds to start on a busy
        # machine, and then rightly get it: CI saw that with a 3 s lease).
        again = contend_on_cue(b, env)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = time.monotonic()
        code, err = cue(again)
        assert code == 1 and f"perfloop process {first.pid}" in err, err
        while (got := contend(b, env)).returncode != 0:
            assert time.monotonic() - killed_at < ttl + 10, got.stderr
            time.sleep(0.3)
        assert got.stdout == "held\nreleased\n"
        assert time.monotonic() - killed_at >= ttl * 0.5  # it waited for the expiry
    finally:
        first.kill()
        first.wait()


def test_a_dead_holder_on_the_same_machine_is_taken_over_at_once(tmp_path: Path, pg_url: str) -> None:
    env = {**os.environ, "PERFLOOP_STORE": pg_url, "PERFLOOP_LEASE_SECONDS": "600", "PYTHONPATH": os.getcwd()}
    first = holder(tmp_path / "home", 600, env)
    first.send_signal(signal.SIGKILL)
    first.wait()
    t0 = time.monotonic()
    assert contend(tmp_path / "home", env).stdout == "held\nreleased\n"
    assert time.monotonic() - t0 < 30


def test_postgres_checkpoints_hold_no_secret_even_in_inline_strings(
    tmp_path: Path, pg_server: PgServer
) -> None:
    """PostgresSaver stores a state's plain strings as JSONB, past the serializer: perfloop's saver
    masks them; LangGraph's own (the control) would have stored the secret."""
    from typing import TypedDict

    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import START, StateGraph
    from psycopg.rows import dict_row

    from agent.sessions.checkpoint import open_checkpointer, serializer
    from tools import secrets
    from tools.store.db import pg_connect

    class S(TypedDict):
        note: str

    secret = "pw-" + os.urandom(8).hex()
    secrets.register(secret)
    builder = StateGraph(S)
    builder.add_node("n", lambda s: {"note": s["note"] + " seen"})
    builder.add_edge(START, "n")
    dbs = {}
    for name in ("ours", "control"):
        dbs[name] = pg_server.new_db()
        url = pg_server.url(dbs[name])
        if name == "ours":
            saver = open_checkpointer(tmp_path, url)
        else:
            saver = PostgresSaver(
                pg_connect(url, prepare_threshold=0, row_factory=dict_row), serde=serializer()
            )
            saver.setup()
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"note": f"the server said {secret}"}, {"configurable": {"thread_id": "t"}})
        assert graph.get_state({"configurable": {"thread_id": "t"}}).values["note"].endswith(" seen")
    assert secret.encode() in pg_server.dump(dbs["control"])
    assert secret.encode() not in pg_server.dump(dbs["ours"])
    assert b"the server said ***" in pg_server.dump(dbs["ours"])


def test_a_postgres_store_at_v1_is_migrated_and_new_ones_open_concurrently(pg_server: PgServer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    old = pg_server.new_db()
    pg_server.sql(MIGRATIONS["postgres"][0] + "CREATE TABLE perfloop_schema (version INTEGER PRIMARY KEY);"
                  "INSERT INTO perfloop_schema VALUES (1);", old)  # fmt: skip
    pg_server.sql(f"INSERT INTO sessions VALUES ('{SID}', '2026-11-30', '{info().model_dump_json()}')", old)
    store = SessionStore(Path("/nonexistent"), pg_server.url(old))
    assert store.db.version() == 4 and store.get_session(SID) == info() and store.held() == {}
    store.close()
    fresh = pg_server.url(pg_server.new_db())  # four processes' first open at once: one migrates
    with ThreadPoolExecutor(4) as pool:
        stores = list(pool.map(lambda _: SessionStore(Path("/nonexistent"), fresh), range(4)))
    assert [s.db.version() for s in stores] == [4, 4, 4, 4]
    assert pg_server.sql(
        "SELECT version FROM perfloop_schema ORDER BY version", fresh.rsplit("/", 1)[1]
    ).split() == ["1", "2", "3", "4"]
    for s in stores:
        s.close()
