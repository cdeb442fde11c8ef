"""The demo loop on a shared PostgreSQL store (a real server, tests/pg.py) against the same loop on
SQLite: same results, same replay, export/import between the two; two "machines" (two
$PERFLOOP_HOMEs on one database) listing, approving and resuming each other's sessions, a killed
holder's lease expiring; no secret in the database. The durable-session suite itself
(tests/e2e/test_durable.py, test_concurrent_resume.py) runs every test on both stores."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from agent.sessions.reading.stored import StoredSessions
from tests.e2e.conftest import (
    PERFLOOP,
    assert_clean,
    git,
    kept_unless_drifted,
    last_json,
    make_repo,
    perfloop,
    write_target,
)
from tests.pg import PgServer
from tools.store.db import Db
from tools.store.sessions import SessionStore

pytestmark = pytest.mark.e2e
SAME = ("status", "accepted", "rejected", "outputs_identical", "server_launches", "iterations", "verdict")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, pg_server: PgServer) -> dict:
    """The same one-iteration demo session, once on SQLite and once on Postgres (machine A)."""
    tmp = tmp_path_factory.mktemp("pgstore")
    url = pg_server.url(pg_server.new_db())
    out: dict = {"tmp": tmp, "url": url}
    procs = {}
    for name, store in (("sqlite", ""), ("postgres", url)):  # side by side, to keep CI time down
        repo = make_repo(tmp / f"engine-{name}")
        target = write_target(tmp / f"{name}.toml", repo, looks=1)
        procs[name] = subprocess.Popen(
            [str(PERFLOOP), "run", "--approve", "auto", str(target), "--json", "--max-iterations", "1"],
            env={**os.environ, "PERFLOOP_HOME": str(tmp / f"home-{name}"), "PERFLOOP_STORE": store},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=900)
        assert proc.returncode == 0, stderr[-3000:]
        out[name] = last_json(subprocess.CompletedProcess([], 0, stdout, stderr))
    return out


def test_the_demo_loop_and_replay_give_the_same_results_on_postgres_as_on_sqlite(runs: dict) -> None:
    lite, pg = runs["sqlite"], runs["postgres"]
    # the two sessions run side by side on the two cores: each verdict is its own live measurement,
    # so a fix either kept or inconclusive for the load (drift, no interval) counts as the same
    kept = [
        kept_unless_drifted(
            s["accepted"] == ["kv-cache-full-pool-cast"], s["decision"] or f"no decision: {s}"
        )
        for s in (lite, pg)
    ]
    same = SAME if kept == [True, True] else ("status", "server_launches", "iterations")
    assert {k: pg[k] for k in same} == {k: lite[k] for k in same}
    assert all(s["outputs_identical"] is True for s, k in zip((lite, pg), kept, strict=True) if k)
    tmp = runs["tmp"]
    assert not (tmp / "home-postgres" / "sessions.sqlite").exists()  # nothing went to SQLite
    assert not (tmp / "home-postgres" / "checkpoints.sqlite").exists()
    for name, store in (("sqlite", ""), ("postgres", runs["url"])):
        rep = perfloop(
            tmp / f"home-{name}", "replay", runs[name]["session"], "--json", env={"PERFLOOP_STORE": store}
        )
        assert rep.returncode == 0, rep.stderr[-2000:]
        replayed = last_json(rep)
        assert replayed.pop("worded_differently") == []  # the same perfloop recorded it
        assert replayed.pop("read_back") is False  # the first replay runs the graph
        assert replayed.pop("matches_recording") is True and replayed == {
            **runs[name],
            "status": replayed["status"],
        }
    shown = last_json(
        perfloop(tmp / "home-postgres", "--store", runs["url"], "show", pg["session"], "--json")
    )
    assert [d["verdict"] for d in shown["decisions"]] == [pg["verdict"]]


def test_export_and_import_between_postgres_and_sqlite(runs: dict, tmp_path: Path) -> None:
    url, tmp = runs["url"], runs["tmp"]
    for name, src, dst in (("postgres", url, ""), ("sqlite", "", url)):
        sid, out = runs[name]["session"], tmp_path / f"{name}.json.gz"
        exported = perfloop(tmp / f"home-{name}", "export", sid, "-o", str(out), env={"PERFLOOP_STORE": src})
        assert exported.returncode == 0, exported.stderr
        home = tmp_path / f"from-{name}"
        assert perfloop(home, "import", str(out), env={"PERFLOOP_STORE": dst}).returncode == 0
        rep = perfloop(home, "replay", sid, "--json", env={"PERFLOOP_STORE": dst})
        assert rep.returncode == 0, rep.stderr[-2000:]
        assert (
            last_json(rep)["matches_recording"] is True
            and last_json(rep)["accepted"] == runs[name]["accepted"]
        )
        shown = last_json(perfloop(home, "show", sid, "--json", env={"PERFLOOP_STORE": dst}))
        assert shown["session"]["id"] == sid and shown["runs"]["unsigned_because"] == "no checkpoint"
        if dst:  # LangGraph's checkpoint table read without LangGraph: none of the imported session,
            stored = StoredSessions(home, SessionStore(home / "sessions.sqlite", dst))  # one of A's
            assert not stored.checkpointed(sid) and stored.checkpointed(runs["postgres"]["session"])
            stored.store.close()


KILLED_LEASE_S = 20
"""The lease of a holder that gets killed: long enough that the other machine's next command, even
started on a loaded machine, finds it live; the first holder's (4 s) lets the test move on quickly."""


def lease_left(url: str, sid: str) -> float | None:
    """Seconds left on the session's lease by the database's clock (None: no lease row)."""
    db = Db(url, Path(os.devnull))
    try:
        rows = db.rows(f"SELECT expires_at - {db.now} FROM session_leases WHERE session_id = ?", (sid,))
    finally:
        db.close()
    return float(rows[0][0]) if rows else None


def resume_once_free(home: Path, sid: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`perfloop resume` from `home`'s machine, right after another machine's holder was killed:
    refused while the killed holder's lease is live (always: it has KILLED_LEASE_S), then, once
    the database's clock passes its expiry, run."""
    left = lease_left(env["PERFLOOP_STORE"], sid)
    assert left is not None and left > 0, left  # the killed holder's lease outlives it
    early = perfloop(home, "resume", sid, env=env)
    assert early.returncode == 2, (early.returncode, early.stderr[-2000:])
    assert f"session {sid} is already being run by perfloop process" in early.stderr, early.stderr
    assert "its lease then expires within" in early.stderr, early.stderr  # another machine's lease
    deadline = time.monotonic() + KILLED_LEASE_S + 30
    while (left := lease_left(env["PERFLOOP_STORE"], sid)) is not None and left > 0:
        assert time.monotonic() < deadline, left
        time.sleep(min(left, 1.0) + 0.05)
    return perfloop(home, "resume", sid, "--json", env=env)


def test_machines_take_turns_on_a_session_each_resuming_once_the_killed_ones_lease_expires(
    runs: dict, tmp_path: Path, pg_server: PgServer
) -> None:
    """Machine A runs a session (a secret passed to the server) until it pauses for approval;
    machine B (the same user: A's signing key copied to it) lists it and approves it, and is killed as the patch commits; A is refused while B's
    lease is live, then resumes and is killed inside `measure`; B resumes it to the end. One commit,
    the recording replays, the database holds no secret."""
    secret = "sk-planted-" + os.urandom(8).hex()
    repo = make_repo(tmp_path / "engine")
    target = write_target(tmp_path / "t.toml", repo, looks=1)
    seen = tmp_path / "seen.sha"
    target.write_text(
        target.read_text().replace(
            'argv = ["bash", "launch.sh",',
            f'pass_env = ["PERFLOOP_TEST_API_KEY"]\nargv = ["bash", "-c", "printf %s \\"$PERFLOOP_TEST_API_KEY\\" '
            f'| sha256sum > {seen} && exec bash launch.sh \\"$@\\"", "launch",',
        )
    )
    env = {"PERFLOOP_STORE": runs["url"], "PERFLOOP_TEST_API_KEY": secret, "PERFLOOP_LEASE_SECONDS": "4"}
    machine_a, machine_b = tmp_path / "machine-a", tmp_path / "machine-b"
    paused = perfloop(machine_a, "run", str(target), "--approve", "manual", "--json",
                      "--max-iterations", "1", env=env)  # fmt: skip
    sid = last_json(paused)["session"]
    listed = {s["id"]: s for s in last_json(perfloop(machine_b, "sessions", "--json", env=env))}
    assert runs["postgres"]["session"] in listed  # every machine's sessions
    assert (listed[sid]["status"], listed[sid]["host"], listed[sid]["held_by"]) == (
        "paused",
        socket.gethostname(),
        None,
    )
    table = perfloop(machine_b, "sessions", env={**env, "COLUMNS": "250"}).stdout
    assert "host" in table and socket.gethostname() in table
    key = machine_b / "signing.key"  # one user's two machines share the key that signs sessions
    key.write_bytes((machine_a / "signing.key").read_bytes())
    key.chmod(0o600)
    repo.rename(tmp_path / "elsewhere")  # as seen from a machine without the target's checkout
    refused = perfloop(machine_b, "approve", sid, env=env)
    assert refused.returncode == 2 and refused.stderr == (
        f"error: session {sid} works on {repo}, which is not on this machine (it last ran on "
        f"{socket.gethostname()}); resume or approve it there\n"
    )
    (tmp_path / "elsewhere").rename(repo)
    assert (
        last_json(perfloop(machine_b, "sessions", "--json", env=env))[-1]["status"] == "paused"
    )  # unchanged

    faults = tmp_path / "faults.txt"  # each point fires once, in the first process that reaches it
    faults.write_text("git:ref-moved\nnode:measure\n")
    armed = {**env, "PERFLOOP_FAULTS_FILE": str(faults), "PERFLOOP_LEASE_SECONDS": str(KILLED_LEASE_S)}
    killed = perfloop(machine_b, "approve", sid, "--json", env=armed)  # killed as the patch commits
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    killed = resume_once_free(machine_a, sid, armed)  # then killed inside `measure`
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = resume_once_free(machine_b, sid, env)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert faults.read_text() == ""
    s = last_json(resumed)
    if kept_unless_drifted(s["accepted"] == ["kv-cache-full-pool-cast"], s["decision"]):
        assert (
            git(repo, "rev-list", "--count", f"main..{s['branch']}").strip() == "1"
        )  # the patch committed once
    assert seen.read_text().split()[0] == hashlib.sha256(secret.encode()).hexdigest()  # it was passed
    assert last_json(perfloop(machine_b, "sessions", "--json", env=env))[-1]["status"] == "done"
    rep = perfloop(machine_b, "replay", sid, "--json", env=env)
    assert rep.returncode == 0 and last_json(rep)["matches_recording"] is True, rep.stderr[-2000:]
    assert secret.encode() not in pg_server.dump(runs["url"].rsplit("/", 1)[1])
    assert [p for p in tmp_path.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()] == []
    assert secret not in paused.stdout + paused.stderr + resumed.stdout + resumed.stderr
    assert_clean(repo, s)
